/*
 * Per-process counts of intercepted calls, so tests and GPU claims can say
 * "the library saw N launches". Counted in process memory for every gated
 * call (under a gate or not); at exit, with KREX_INTERCEPT_STATS set, one JSON
 * line is appended to that file (one write() on O_APPEND: lines of several
 * processes never interleave; "%p" in the path is replaced by the pid). A
 * process that made no gated call and resolved no driver entry point writes
 * nothing.
 *
 *   {"pid": 123, "tenant": "7", "calls": {"cuLaunchKernel": 10, ...},
 *    "classes": {"launch": 10, ...}, "events": {"swapped": 3, "unmapped": 0, "unprotected": 0}}
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "intercept_internal.h"

static uint64_t counts[KREX_GATED_MAX];

/* Named event counters; a short fixed list keeps this lock-free. */
static const char *const event_names[] = {
    "swapped", "unmapped", "parked", "fail_open", "drains", "unprotected",
    /* lazy_load.c: functions loaded before their launch, and handles it could not ask about */
    "lazy_load", "lazy_load_failed", "lazy_load_kernel_handle", "lazy_load_unknown_handle",
    "integrity_flagged",  /* intercept_integrity.c: timed windows with a flag */
    "integrity_unjudged", /* intercept_integrity.c: timed windows the log no longer held */
    "untracked",          /* intercept_events.c: timings with an event the full table dropped */
    "event_table_full",   /* intercept_events.c: records the table had no room for */
};
#define N_EVENTS (sizeof event_names / sizeof event_names[0])
static uint64_t events[N_EVENTS];

static const char *const class_names[KREX_CLASS_COUNT] = {
    "launch", "host_func", "graph", "memcpy", "memset", "event",
    "stream_memop", "mem_async", "context", "module", "other", "memcpy_sync", "memset_sync", "memory",
};

void krex_stats_count(unsigned i)
{
    if (i < KREX_GATED_MAX)
        __atomic_fetch_add(&counts[i], 1, __ATOMIC_RELAXED);
}

void krex_stats_note(const char *what)
{
    for (unsigned e = 0; e < N_EVENTS; e++)
        if (strcmp(event_names[e], what) == 0)
            __atomic_fetch_add(&events[e], 1, __ATOMIC_RELAXED);
}

void krex_stats_after_fork(void)
{
    memset(counts, 0, sizeof counts);
    memset(events, 0, sizeof events);
}

struct buf {
    char *p;
    size_t len, cap;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (b->p != NULL && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (p == NULL)
            return;
        b->p = p;
        b->cap = cap;
    }
}

static void stats_path(char *out, size_t size, const char *tmpl)
{
    const char *at = strstr(tmpl, "%p");
    if (at == NULL)
        snprintf(out, size, "%s", tmpl);
    else
        snprintf(out, size, "%.*s%d%s", (int)(at - tmpl), tmpl, (int)getpid(), at + 2);
}

__attribute__((destructor)) static void stats_dump(void)
{
    const char *tmpl = getenv(KREX_ENV_INTERCEPT_STATS);
    if (tmpl == NULL || *tmpl == '\0')
        return;
    /* Helper processes that never touched the driver (compilers, shells under
     * the same preload) leave no line. */
    bool any = false;
    for (unsigned i = 0; i < KREX_GATED_MAX && !any; i++)
        any = __atomic_load_n(&counts[i], __ATOMIC_RELAXED) != 0;
    for (unsigned e = 0; e < N_EVENTS && !any; e++)
        any = __atomic_load_n(&events[e], __ATOMIC_RELAXED) != 0;
    if (!any)
        return;
    const char *tenant = getenv(KREX_ENV_TENANT_ID);
    uint64_t per_class[KREX_CLASS_COUNT] = {0};
    struct buf b = {0};
    put(&b, "{\"pid\": %d, \"tenant\": \"%s\", \"calls\": {", (int)getpid(), tenant ? tenant : "");
    const char *sep = "";
    for (unsigned i = 0; i < krex_gated_count && i < KREX_GATED_MAX; i++) {
        uint64_t n = __atomic_load_n(&counts[i], __ATOMIC_RELAXED);
        if (n == 0)
            continue;
        put(&b, "%s\"%s\": %llu", sep, krex_gated_fns[i].name, (unsigned long long)n);
        if (krex_gated_fns[i].klass < KREX_CLASS_COUNT) /* tracked, ungated calls have no class of the gate */
            per_class[krex_gated_fns[i].klass] += n;
        sep = ", ";
    }
    put(&b, "}, \"classes\": {");
    for (unsigned c = 0; c < KREX_CLASS_COUNT; c++)
        put(&b, "%s\"%s\": %llu", c ? ", " : "", class_names[c], (unsigned long long)per_class[c]);
    put(&b, "}, \"events\": {");
    for (unsigned e = 0; e < N_EVENTS; e++)
        put(&b, "%s\"%s\": %llu", e ? ", " : "", event_names[e],
            (unsigned long long)__atomic_load_n(&events[e], __ATOMIC_RELAXED));
    put(&b, "}}\n");
    if (b.p == NULL)
        return;
    char path[4096];
    stats_path(path, sizeof path, tmpl);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, b.p, b.len);
        (void)w;
        close(fd);
    }
    free(b.p);
}
