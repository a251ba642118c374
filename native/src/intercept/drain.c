/*
 * Drain helper: when the runtime asks (drain_req bumped in our gate entry), wait
 * until the GPU work this process already submitted has finished, then
 * acknowledge (drain_ack = drain_req, FUTEX_WAKE). Only then may the runtime
 * let the region holder measure.
 *
 * Plain C threads, started with the process's registration (a coordinator
 * per gate entry: a command placed on a set of GPUs has one in each GPU's
 * gate, and a drain asked on any of them waits for all of its work):
 *   - the coordinator waits for requests and acknowledges, within a bound;
 *   - one worker waits for the device to complete what this process
 *     submitted: the vendor's krex_drain_sync_all (drain_cuda.c synchronises
 *     each context used; the HIP library each device, hip_intercept/hip_drain.c).
 * The split exists because a synchronise cannot be interrupted: when it
 * outlasts the bound the coordinator acknowledges KREX_DRAIN_TIMED_OUT and the
 * worker finishes in the background. Both the CUDA and the HIP library link
 * this file.
 *
 * Both threads call the real driver directly and run with krex_depth set, so
 * the gate (closed at that moment) never stops them.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "intercept_internal.h"

/* Our entry in each gate (several for a command placed on a set of GPUs):
 * written once each, before n_entries counts it. */
static pthread_mutex_t entries_lock = PTHREAD_MUTEX_INITIALIZER;
static struct krex_gate_proc *entries[KREX_GATE_SET_MAX];
static unsigned n_entries;
static int started;

/* Jobs: the coordinator posts, the worker completes; both counters only grow. */
static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_posted_cv;
static pthread_cond_t job_done_cv;
static uint64_t job_posted, job_done;
static uint32_t job_result;

void krex_drain_publish_count(struct krex_gate_proc *e, unsigned noted)
{
    __atomic_store_n(&e->contexts, noted, __ATOMIC_RELAXED);
    __atomic_store_n(&e->uses_cuda, noted > 0, __ATOMIC_RELAXED);
}

void krex_drain_publish_everywhere(unsigned noted)
{
    for (unsigned k = 0, n = __atomic_load_n(&n_entries, __ATOMIC_ACQUIRE); k < n; k++)
        krex_drain_publish_count(entries[k], noted);
}

static void *worker_main(void *arg)
{
    (void)arg;
    krex_depth = 1;
    krex_drain_worker_init();
    pthread_mutex_lock(&job_lock);
    for (;;) {
        while (job_done == job_posted)
            pthread_cond_wait(&job_posted_cv, &job_lock);
        uint64_t target = job_posted;
        pthread_mutex_unlock(&job_lock);
        uint32_t r = krex_drain_sync_all();
        pthread_mutex_lock(&job_lock);
        job_done = target;
        job_result = r;
        pthread_cond_broadcast(&job_done_cv);
    }
    return NULL;
}

static uint64_t drain_bound_ns(void)
{
    const char *env = getenv(KREX_ENV_DRAIN_TIMEOUT_MS);
    if (env != NULL && *env != '\0') {
        char *end;
        unsigned long long ms = strtoull(env, &end, 10);
        if (*end == '\0' && ms > 0)
            return ms * 1000000ull;
    }
    const struct krex_gate_header *g = krex_gate_header();
    uint64_t v = g ? __atomic_load_n(&g->drain_timeout_ns, __ATOMIC_RELAXED) : 0;
    return v ? v : KREX_GATE_DEFAULT_DRAIN_TIMEOUT_NS;
}

static uint32_t drain_now(void)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    uint64_t ns = (uint64_t)deadline.tv_nsec + drain_bound_ns();
    deadline.tv_sec += (time_t)(ns / 1000000000ull);
    deadline.tv_nsec = (long)(ns % 1000000000ull);

    pthread_mutex_lock(&job_lock);
    /* Always a fresh round: a round already running may have started before
     * work this drain must cover. */
    uint64_t target = ++job_posted;
    pthread_cond_signal(&job_posted_cv);
    int rc = 0;
    while (job_done < target && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&job_done_cv, &job_lock, &deadline);
    uint32_t result = job_done >= target ? job_result : KREX_DRAIN_TIMED_OUT;
    pthread_mutex_unlock(&job_lock);
    return result;
}

static void *coordinator_main(void *arg)
{
    struct krex_gate_proc *e = arg;
    krex_depth = 1;
    uint32_t handled = __atomic_load_n(&e->drain_ack, __ATOMIC_ACQUIRE);
    for (;;) {
        uint32_t req = __atomic_load_n(&e->drain_req, __ATOMIC_ACQUIRE);
        if (req == handled) {
            krex_futex_wait(&e->drain_req, req, 0);
            continue;
        }
        uint32_t result = drain_now();
        __atomic_store_n(&e->drain_result, result, __ATOMIC_RELAXED);
        __atomic_fetch_add(&e->drains_total, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&e->drain_ack_ns, krex_now_ns(), __ATOMIC_RELAXED);
        krex_stats_note("drains");
        __atomic_store_n(&e->drain_ack, req, __ATOMIC_SEQ_CST);
        krex_futex_wake_all(&e->drain_ack);
        handled = req;
    }
    return NULL;
}

static void init_sync_objects(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&job_done_cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_cond_init(&job_posted_cv, NULL);
}

void krex_drain_start(struct krex_gate_proc *e)
{
    pthread_mutex_lock(&entries_lock);
    for (unsigned k = 0; k < n_entries; k++)
        if (entries[k] == e) {
            pthread_mutex_unlock(&entries_lock);
            return; /* started for this entry already */
        }
    if (n_entries == KREX_GATE_SET_MAX) {
        pthread_mutex_unlock(&entries_lock);
        return;
    }
    entries[n_entries] = e;
    __atomic_store_n(&n_entries, n_entries + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&entries_lock);
    krex_drain_publish(e);
    bool first = !__atomic_exchange_n(&started, 1, __ATOMIC_ACQ_REL);
    if (first)
        init_sync_objects();

    /* The helpers take no signals: those belong to the program's threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t t;
    if ((first && pthread_create(&t, &attr, worker_main, NULL) != 0) ||
        pthread_create(&t, &attr, coordinator_main, e) != 0)
        krex_log("cannot start the drain helper; drains of this process will time out");
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void krex_drain_after_fork(void)
{
    pthread_mutex_init(&job_lock, NULL);
    pthread_mutex_init(&entries_lock, NULL);
    krex_drain_vendor_after_fork();
    n_entries = 0;
    job_posted = job_done = 0;
    started = 0;
}
