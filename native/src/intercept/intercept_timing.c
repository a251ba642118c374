/*
 * Times from below: the elapsed time the real driver returned for each timed
 * window that measurement integrity judged (intercept_integrity.c), kept per
 * region (the gate's generation, a few regions back, as the counts are), so
 * that the region's record says what the process measured in it, in the
 * driver's own numbers, beside whether each window held its work.
 *
 * A region keeps the first TIMES_MAX times; later windows are still judged
 * and counted, and their times counted as dropped (the summary says how
 * many). krex_region_timing summarises the kept ones at the query (a sort,
 * off the timed path): "<windows>,<median>,<min>,<p10>,<p90>,<max>,<mean>,<dropped>",
 * milliseconds printed with 17 significant digits (the double, and so the
 * driver's float, read back exactly), the median of an even count the mean of the middle two,
 * p10/p90 linearly interpolated between the closest ranks (numpy's default),
 * then ",<host_paced>": the windows whose host-side span (the start record
 * call to the end record call) was at least HOST_PACED of the GPU's elapsed
 * time. In such a window the GPU's time is paced by the host: it waited for
 * launches the host had not issued yet, or the host waited on the GPU inside
 * the window. Its time then moves with the host's speed (other processes'
 * load on the CPU, its caches and memory), which no GPU-side witness sees;
 * in a window the host issued well ahead of the GPU it does not.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "intercept_internal.h"
#include "krex.h"

#define TIMING_REGIONS 8u /* as many regions back as the counts keep */
#define TIMES_MAX 4096u
#define HOST_PACED 0.8 /* host span / GPU time at or over which a window counts as host-paced */

struct region_times {
    uint64_t region;
    uint32_t kept;
    uint64_t dropped;
    uint64_t host_paced; /* every judged window counts, kept or dropped */
    float ms[TIMES_MAX];
};
static struct region_times store[TIMING_REGIONS];
static float sorted[TIMES_MAX]; /* the query's scratch, under times_lock */
static uint64_t last_region;
static pthread_mutex_t times_lock = PTHREAD_MUTEX_INITIALIZER;

static struct region_times *times_of(uint64_t region)
{
    struct region_times *oldest = &store[0];
    for (unsigned i = 0; i < TIMING_REGIONS; i++) {
        if (store[i].region == region)
            return &store[i];
        if (store[i].region < oldest->region)
            oldest = &store[i];
    }
    oldest->region = region;
    oldest->kept = 0;
    oldest->dropped = 0;
    oldest->host_paced = 0;
    return oldest;
}

void krex_timing_note(uint64_t region, float ms, double host_ms)
{
    pthread_mutex_lock(&times_lock);
    struct region_times *t = times_of(region);
    if (ms > 0 && host_ms >= HOST_PACED * (double)ms)
        t->host_paced++;
    if (t->kept < TIMES_MAX)
        t->ms[t->kept++] = ms;
    else
        t->dropped++;
    last_region = region;
    pthread_mutex_unlock(&times_lock);
}

static int by_value(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The value at fraction p of the sorted times, between the closest ranks. */
static double quantile(const float *v, uint32_t n, double p)
{
    double h = p * (double)(n - 1);
    uint32_t lo = (uint32_t)h; /* h >= 0: the floor */
    if (lo + 1 >= n)
        return v[n - 1];
    /* Rounded apart from the sum (no fused multiply-add, which compilers
     * contract to on some machines): the same double numpy or Python gets. */
    volatile double step = (h - (double)lo) * ((double)v[lo + 1] - (double)v[lo]);
    return (double)v[lo] + step;
}

/* One number, whatever LC_NUMERIC the program chose: a decimal comma would
 * read as a separator on the wire. */
static void number(char *out, size_t size, double x)
{
    snprintf(out, size, "%.17g", x);
    for (char *c = out; *c; c++)
        if (*c == ',')
            *c = '.';
}

KREX_EXPORT int krex_region_timing(char *buf, size_t size)
{
    if (buf == NULL || size == 0)
        return -EINVAL;
    if (krex_gate_header() == NULL)
        return -ENODEV; /* no gate: no window was judged */
    if (!krex_integrity_enabled())
        return -ENOTSUP;
    uint64_t region = krex_current_region();
    uint32_t n = 0;
    uint64_t dropped = 0, host_paced = 0;
    pthread_mutex_lock(&times_lock);
    if (region == 0)
        region = last_region;
    for (unsigned i = 0; region != 0 && i < TIMING_REGIONS; i++)
        if (store[i].region == region) {
            n = store[i].kept;
            dropped = store[i].dropped;
            host_paced = store[i].host_paced;
            memcpy(sorted, store[i].ms, n * sizeof sorted[0]);
        }
    buf[0] = '\0';
    if (n == 0) {
        pthread_mutex_unlock(&times_lock);
        return 0; /* no window judged in this region: nothing to summarise */
    }
    qsort(sorted, n, sizeof sorted[0], by_value);
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += sorted[i];
    double median = n % 2 ? sorted[n / 2] : ((double)sorted[n / 2 - 1] + (double)sorted[n / 2]) / 2;
    double values[] = {median, sorted[0], quantile(sorted, n, 0.1), quantile(sorted, n, 0.9), sorted[n - 1],
                       sum / n};
    pthread_mutex_unlock(&times_lock);
    char text[6][32];
    for (unsigned i = 0; i < 6; i++)
        number(text[i], sizeof text[i], values[i]);
    int w = snprintf(buf, size, "%u,%s,%s,%s,%s,%s,%s,%llu,%llu", n, text[0], text[1], text[2], text[3], text[4],
                     text[5], (unsigned long long)dropped, (unsigned long long)host_paced);
    return w < 0 || (size_t)w >= size ? -ENOSPC : w;
}
