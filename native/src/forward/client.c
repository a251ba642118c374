/*
 * The channel of the forwarding client: attaches the command's segment at the
 * first call, writes requests into its ring and waits for replies.
 *
 * Requests of all the process's threads go through one lock; a request that
 * wants a reply keeps it until the reply has been read, so the staging area
 * and the reply words belong to one request at a time. The server executes
 * requests in the order they were written, whichever thread wrote them.
 *
 * Waiting (for ring space, for a reply) spins briefly and then parks on a
 * futex for at most PARK_NS at a time; between parks it checks that the
 * server still serves (the runtime marks the segment FAILED when its server
 * dies, and a server that vanished without that is seen by its pid). A dead
 * server fails the call, and every later one, with
 * CUDA_ERROR_DEVICE_UNAVAILABLE and one line on stderr that says why.
 */
#include "client.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PARK_NS 20000000ull /* 20 ms */

static pthread_mutex_t send_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t attach_once = PTHREAD_ONCE_INIT;
static struct fwd_segment seg;
static CUresult attach_result = CUDA_ERROR_NOT_INITIALIZED;
static uint64_t ring_size, staging_size; /* our copies of the header's */
static uint64_t next_seq;
static int dead;          /* the server stopped serving: every call fails */
static int forked_child;  /* like the real driver: a child of a process that used CUDA cannot */
static int initialised;

void fwd_log(const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof line, "krex forward: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    if (len + 1 < sizeof line)
        line[len++] = '\n';
    ssize_t w = write(2, line, len);
    (void)w;
}

static void after_fork_child(void)
{
    forked_child = 1;
    pthread_mutex_init(&send_lock, NULL);
}

static void attach(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
    const char *path = getenv(KREX_FWD_ENV_RING);
    if (path == NULL || *path == '\0') {
        fwd_log("%s is not set: this libcuda.so.1 forwards driver calls to a context server of the KREX "
                "runtime (forwarded mode) and serves nothing on its own",
                KREX_FWD_ENV_RING);
        attach_result = CUDA_ERROR_NO_DEVICE;
        return;
    }
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        fwd_log("cannot open the forwarding segment %s: %s", path, strerror(errno));
        attach_result = CUDA_ERROR_NO_DEVICE;
        return;
    }
    char err[200];
    int rc = fwd_map(fd, &seg, err, sizeof err);
    close(fd);
    if (rc != 0) {
        fwd_log("forwarding segment %s: %s", path, err);
        attach_result = CUDA_ERROR_NO_DEVICE;
        return;
    }
    ring_size = seg.h->ring_size;
    staging_size = seg.h->staging_size;
    /* One process per command talks to its server: a second (a child that
     * execs another CUDA program) would interleave its requests with ours. */
    int32_t none = 0, me = (int32_t)getpid();
    if (!__atomic_compare_exchange_n(&seg.h->client_pid, &none, me, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
        none != me) {
        fwd_log("process %d already uses this command's context server; in forwarded mode one process of a "
                "command may use the GPU",
                (int)none);
        attach_result = CUDA_ERROR_DEVICE_UNAVAILABLE;
        return;
    }
    attach_result = CUDA_SUCCESS;
}

bool fwd_initialised(void)
{
    return __atomic_load_n(&initialised, __ATOMIC_ACQUIRE) != 0;
}

void fwd_set_initialised(void)
{
    __atomic_store_n(&initialised, 1, __ATOMIC_RELEASE);
}

size_t fwd_max_blob(void)
{
    pthread_once(&attach_once, attach);
    return attach_result == CUDA_SUCCESS ? (size_t)(ring_size / 4 - sizeof(struct krex_fwd_msg)) : 0;
}

size_t fwd_staging_size(void)
{
    pthread_once(&attach_once, attach);
    return attach_result == CUDA_SUCCESS ? (size_t)staging_size : 0;
}

/* False (and the reason said once) when the server no longer serves. */
static bool server_alive(void)
{
    if (dead)
        return false;
    uint32_t state = __atomic_load_n(&seg.h->server_state, __ATOMIC_ACQUIRE);
    char why[400];
    if (state == KREX_FWD_STATE_FAILED || state == KREX_FWD_STATE_ENDED) {
        char reason[sizeof seg.h->reason + 1];
        memcpy(reason, seg.h->reason, sizeof seg.h->reason);
        reason[sizeof seg.h->reason] = '\0';
        snprintf(why, sizeof why, "the context server stopped serving this command: %s",
                 reason[0] ? reason : "no reason given");
    } else {
        int32_t pid = __atomic_load_n(&seg.h->server_pid, __ATOMIC_ACQUIRE);
        if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH)
            return true;
        snprintf(why, sizeof why, "the context server (pid %d) has died", (int)pid);
    }
    if (!__atomic_exchange_n(&dead, 1, __ATOMIC_ACQ_REL))
        fwd_log("%s; GPU calls fail from now on", why);
    return false;
}

/* Room for `need` contiguous bytes at the head, writing a filler to the
 * ring's end first when they would wrap. Returns the offset, or -1 when the
 * server died while we waited. */
static int64_t reserve(uint32_t need)
{
    struct krex_fwd_header *h = seg.h;
    for (;;) {
        uint64_t head = h->req_head;
        uint64_t tail = __atomic_load_n(&h->req_tail, __ATOMIC_ACQUIRE);
        uint64_t off = head & (ring_size - 1);
        uint64_t to_end = ring_size - off;
        uint64_t want = to_end < need ? to_end + need : need;
        if (ring_size - (head - tail) >= want) {
            if (to_end < need) {
                struct krex_fwd_msg *pad = (struct krex_fwd_msg *)(seg.ring + off);
                pad->size = (uint32_t)to_end;
                pad->op = KREX_FWD_PAD;
                head += to_end;
                __atomic_store_n(&h->req_head, head, __ATOMIC_RELEASE);
                off = 0;
            }
            return (int64_t)off;
        }
        if (!server_alive())
            return -1;
        uint32_t seq = __atomic_load_n(&h->space_seq, __ATOMIC_ACQUIRE);
        __atomic_store_n(&h->client_parked, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&h->req_tail, __ATOMIC_SEQ_CST) == tail)
            fwd_spin_then_park(&h->space_seq, seq, PARK_NS);
        __atomic_store_n(&h->client_parked, 0, __ATOMIC_RELAXED);
    }
}

static CUresult wait_reply(uint32_t before, struct fwd_reply *reply)
{
    struct krex_fwd_header *h = seg.h;
    for (;;) {
        if (__atomic_load_n(&h->reply_seq, __ATOMIC_ACQUIRE) != before)
            break;
        if (!server_alive())
            return CUDA_ERROR_DEVICE_UNAVAILABLE;
        __atomic_store_n(&h->client_parked, 1, __ATOMIC_SEQ_CST);
        fwd_spin_then_park(&h->reply_seq, before, PARK_NS);
        __atomic_store_n(&h->client_parked, 0, __ATOMIC_RELAXED);
    }
    /* A server that stopped serving bumps the word to wake us: that is no
     * reply (the reply words still hold the previous request's). */
    uint32_t state = __atomic_load_n(&h->server_state, __ATOMIC_ACQUIRE);
    if ((state == KREX_FWD_STATE_FAILED || state == KREX_FWD_STATE_ENDED) && !server_alive())
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    CUresult r = (CUresult)h->reply_result;
    memcpy(reply->out, h->reply_out, sizeof reply->out);
    uint64_t len = h->reply_len;
    if (len > staging_size)
        len = staging_size;
    reply->data_len = (size_t)len;
    if (reply->data != NULL)
        memcpy(reply->data, seg.staging, len < reply->data_cap ? len : reply->data_cap);
    /* A request sent without waiting failed since: its error is this call's,
     * as a sticky error of the real driver would be. */
    uint32_t deferred = __atomic_exchange_n(&h->deferred_result, 0, __ATOMIC_ACQ_REL);
    if (deferred != 0) {
        char name[sizeof h->deferred_call + 1];
        memcpy(name, h->deferred_call, sizeof h->deferred_call);
        name[sizeof h->deferred_call] = '\0';
        fwd_log("%s (sent without waiting) failed on the context server with error %u", name, deferred);
        if (r == CUDA_SUCCESS)
            r = (CUresult)deferred;
    }
    return r;
}

CUresult fwd_call(unsigned op, unsigned flags, const uint64_t *args, unsigned nargs, const void *blob,
                  size_t blob_len, const void *blob2, size_t blob2_len, struct fwd_reply *reply)
{
    if (forked_child)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_once(&attach_once, attach);
    if (attach_result != CUDA_SUCCESS)
        return attach_result;
    if (nargs > KREX_FWD_MAX_ARGS || blob_len + blob2_len > fwd_max_blob())
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t size = fwd_round8((uint32_t)(sizeof(struct krex_fwd_msg) + blob_len + blob2_len));
    pthread_mutex_lock(&send_lock);
    if (!server_alive()) {
        pthread_mutex_unlock(&send_lock);
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    int64_t off = reserve(size);
    if (off < 0) {
        pthread_mutex_unlock(&send_lock);
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    struct krex_fwd_header *h = seg.h;
    struct krex_fwd_msg *m = (struct krex_fwd_msg *)(seg.ring + off);
    m->size = size;
    m->op = (uint16_t)op;
    m->flags = (uint16_t)(flags | (reply != NULL ? KREX_FWD_WANT_REPLY : 0));
    m->ctx = (uint64_t)(uintptr_t)fwd_ctx_current();
    m->nargs = nargs;
    m->blob_len = (uint32_t)(blob_len + blob2_len);
    m->seq = ++next_seq;
    memset(m->args, 0, sizeof m->args);
    if (nargs)
        memcpy(m->args, args, nargs * sizeof args[0]);
    if (blob_len)
        memcpy((uint8_t *)(m + 1), blob, blob_len);
    if (blob2_len)
        memcpy((uint8_t *)(m + 1) + blob_len, blob2, blob2_len);
    uint32_t before = __atomic_load_n(&h->reply_seq, __ATOMIC_ACQUIRE);
    __atomic_store_n(&h->req_head, h->req_head + size, __ATOMIC_RELEASE);
    h->calls_sent++;
    __atomic_fetch_add(&h->req_seq, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&h->server_parked, __ATOMIC_SEQ_CST))
        fwd_futex_wake(&h->req_seq);
    CUresult r = CUDA_SUCCESS;
    if (reply != NULL)
        r = wait_reply(before, reply);
    pthread_mutex_unlock(&send_lock);
    return r;
}

/* Regions the process has been granted (the interception library's count,
 * found by name: it is preloaded in front of this library under the runtime,
 * absent when the program runs on its own). */
static int regions_entered(void)
{
    int (*entered)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "krex_regions_entered");
    return entered != NULL ? entered() : 0;
}

CUresult fwd_unknown(const char *name)
{
    pthread_once(&attach_once, attach);
    bool after_region = regions_entered() > 0;
    if (attach_result == CUDA_SUCCESS) {
        char expected = '\0';
        /* The first one is kept for the runtime (it names it in the result). */
        if (__atomic_compare_exchange_n(&seg.h->unknown_call[0], &expected, 'c', false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            snprintf(seg.h->unknown_call, sizeof seg.h->unknown_call, "%s", name);
            __atomic_store_n(&seg.h->unknown_after_region, after_region ? 1u : 0u, __ATOMIC_RELEASE);
        }
    }
    const char *fallback = getenv(KREX_FWD_ENV_FALLBACK);
    if (fallback != NULL && strcmp(fallback, "process") == 0 && !after_region) {
        fwd_log("%s is not forwarded; the command ends here and runs again in process mode", name);
        _exit(KREX_FWD_EXIT_UNKNOWN_CALL);
    }
    if (after_region)
        /* What it measured cannot be measured again behind its back. */
        fwd_log("%s is not forwarded (forwarded mode) and the command has already held a region, so it is not "
                "run again in process mode: the call fails as not supported (error 801)",
                name);
    else
        fwd_log("%s is not forwarded (forwarded mode): it fails as not supported (error 801); run the command in "
                "process mode to use it",
                name);
    return CUDA_ERROR_NOT_SUPPORTED;
}

static unsigned long long staged_copies; /* this process's own count: the segment's is the command's to rewrite */

void fwd_count_staged_pinned(void)
{
    __atomic_fetch_add(&staged_copies, 1, __ATOMIC_RELAXED);
    pthread_once(&attach_once, attach);
    if (attach_result == CUDA_SUCCESS)
        __atomic_fetch_add(&seg.h->staged_pinned_copies, 1, __ATOMIC_RELAXED);
}

FWD_EXPORT unsigned long long krex_forward_staged_copies(void)
{
    return __atomic_load_n(&staged_copies, __ATOMIC_RELAXED);
}

/* The same for forwarded mode's CUDA runtime (libcudart.so.N, src/cudart),
 * which finds it here by name: the runtime entry points it does not have. */
FWD_EXPORT CUresult krex_forward_unknown_call(const char *name)
{
    return fwd_unknown(name != NULL ? name : "(unnamed)");
}
