/*
 * krex-ctxd: a context server of forwarded mode.
 *
 * Started by the runtime (krex_runtime/commands/forwarded/forwarded_pool.py) with its
 * control socket as stdin, the GPU's tenant environment without the
 * interception library (it is not a tenant: the command it serves is, and
 * passes the gate before its calls leave it), and the real or simulated
 * driver on its library path. It creates its context, says `ready`, then
 * serves one command at a time:
 *
 *   runtime -> server   serve <tenant id> <ring bytes> <staging bytes> <pinned bytes>\n
 *                       (+ the segment's descriptor, and the pinned arena's when it has one)
 *   server -> runtime   serving\n
 *   runtime -> server   end\n                 (the command's processes have ended)
 *   server -> runtime   clean ok <ms> <what>\n | clean retire <reason>\n
 *   server -> runtime   failed <reason>\n     (a request it refused; then it retires)
 *
 * While serving it executes requests as they come, spinning briefly and then
 * parking on the segment's futex when there are none; between parks it
 * looks at its control socket. Requests still in the ring when `end` comes
 * are dropped: their command is over.
 *
 * The segment is the command's file: it can rewrite the header and resize
 * the file at any time. The server maps exactly the sizes the runtime sent
 * (fwd_attach: a regular file of that size, its header agreeing), bounds
 * every offset and length by its own copies of them, and survives the file
 * being truncated under it: the SIGBUS of touching a page that is gone puts
 * anonymous memory in the segment's place and fails the segment.
 */
#include "server.h"

#include <errno.h>
#include <stdarg.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONTROL 0
#define PARK_NS 10000000ull /* 10 ms: how soon `end` is seen by an idle server */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    /* One line, no newline inside: the runtime reads lines. */
    for (int i = 0; i < n; i++)
        if (line[i] == '\n')
            line[i] = ' ';
    line[n++] = '\n';
    ssize_t w = send(CONTROL, line, (size_t)n, MSG_NOSIGNAL);
    (void)w;
}

/* Reads one control line and the descriptors passed with it (at most
 * MAX_FDS, -1 for those not passed; any beyond are closed); -1 at EOF. */
#define MAX_FDS 2
static int read_control(char *line, size_t cap, int fds[MAX_FDS])
{
    for (int i = 0; i < MAX_FDS; i++)
        fds[i] = -1;
    size_t got = 0;
    while (got + 1 < cap) {
        char c;
        char ctl[CMSG_SPACE(4 * sizeof(int))];
        struct iovec iov = {&c, 1};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
        ssize_t n = recvmsg(CONTROL, &msg, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
                if (i < MAX_FDS && fds[i] < 0)
                    fds[i] = fd;
                else
                    close(fd);
            }
        }
        if (c == '\n')
            break;
        line[got++] = c;
    }
    line[got] = '\0';
    return 0;
}

static void close_fds(int fds[MAX_FDS])
{
    for (int i = 0; i < MAX_FDS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

static bool control_has_line(void)
{
    struct pollfd p = {CONTROL, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

/* ---- a segment truncated under the server ------------------------------------------- */

/* Two guarded mappings: [0] the segment, [1] the pinned arena. The
 * server's own CPU touches the arena only where the driver copies through
 * it (the simulator does); a real driver's DMA reaches pages it pinned. */
static uint8_t *guard_base[2]; /* NULL when none */
static size_t guard_size[2];
static volatile sig_atomic_t segment_lost, arena_lost;

static void on_sigbus(int sig, siginfo_t *si, void *context)
{
    (void)context;
    uint8_t *at = si->si_addr;
    for (int i = 0; i < 2; i++) {
        uint8_t *base = __atomic_load_n(&guard_base[i], __ATOMIC_ACQUIRE);
        if (base != NULL && at >= base && at < base + guard_size[i] &&
            mmap(base, guard_size[i], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
                MAP_FAILED) {
            *(i == 0 ? &segment_lost : &arena_lost) = 1; /* the access is retried, on memory nobody else sees */
            return;
        }
    }
    signal(sig, SIG_DFL); /* a bus error of something else: die of it when the access is retried */
}

static void guard(int which, void *base, size_t size)
{
    if (which == 0)
        segment_lost = 0;
    else
        arena_lost = 0;
    guard_size[which] = size;
    __atomic_store_n(&guard_base[which], (uint8_t *)base, __ATOMIC_RELEASE);
}

static void unguard(void)
{
    __atomic_store_n(&guard_base[0], NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&guard_base[1], NULL, __ATOMIC_RELEASE);
}

/* The command's pinned arena: a regular file of exactly the runtime's size
 * (the command may resize it later: the guard above), mapped shared. */
static void *map_arena(int fd, uint64_t size, char *err, size_t errlen)
{
    struct stat st;
    if (size == 0 || size % KREX_FWD_PINNED_ALIGN != 0 || size > (1ull << 40)) {
        snprintf(err, errlen, "a pinned arena of %llu bytes (whole pages, at most 1 TiB)", (unsigned long long)size);
        return NULL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
        snprintf(err, errlen, "the pinned arena is not the file the runtime made (%llu bytes)",
                 (unsigned long long)size);
        return NULL;
    }
    void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "cannot map the pinned arena: %s", strerror(errno));
        return NULL;
    }
    return p;
}

static void fail_segment(struct fwd_segment *seg, const char *why)
{
    /* Cut to the header's field: the reason's start says what happened. */
    snprintf(seg->h->reason, sizeof seg->h->reason, "%.*s", (int)sizeof seg->h->reason - 1, why);
    __atomic_store_n(&seg->h->server_state, KREX_FWD_STATE_FAILED, __ATOMIC_RELEASE);
    /* A client waiting for a reply or for room sees the state at once. */
    __atomic_fetch_add(&seg->h->reply_seq, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&seg->h->space_seq, 1, __ATOMIC_SEQ_CST);
    fwd_futex_wake(&seg->h->reply_seq);
    fwd_futex_wake(&seg->h->space_seq);
}

/* Serves one segment until `end` (returns true) or a request it refuses
 * (false, `why` filled). */
static bool serve(struct fwd_segment *seg, char *why, size_t whylen, bool *control_closed)
{
    struct krex_fwd_header *h = seg->h;
    uint64_t ring = seg->ring_size; /* the runtime's size, not the header's */
    uint64_t tail = 0;
    size_t cap = 1 << 16;
    uint8_t *blob = malloc(cap);
    if (blob == NULL) {
        snprintf(why, whylen, "out of memory");
        return false;
    }
    h->req_tail = 0;
    __atomic_store_n(&h->server_pid, (int32_t)getpid(), __ATOMIC_RELEASE);
    __atomic_store_n(&h->server_state, KREX_FWD_STATE_SERVING, __ATOMIC_RELEASE);
    bool ok = true;
    for (;;) {
        if (segment_lost || arena_lost) {
            snprintf(why, whylen, "its %s was truncated under it (by the command): the server stopped serving it",
                     segment_lost ? "segment" : "pinned arena");
            ok = false;
            break;
        }
        uint64_t head = __atomic_load_n(&h->req_head, __ATOMIC_ACQUIRE);
        if (head == tail) {
            if (control_has_line()) {
                char line[128];
                int fds[MAX_FDS];
                if (read_control(line, sizeof line, fds) != 0) {
                    *control_closed = true;
                    break;
                }
                close_fds(fds);
                if (strcmp(line, "end") == 0)
                    break;
                snprintf(why, whylen, "an unexpected control line while serving: %.60s", line);
                ok = false;
                break;
            }
            uint32_t seq = __atomic_load_n(&h->req_seq, __ATOMIC_ACQUIRE);
            __atomic_store_n(&h->server_parked, 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&h->req_head, __ATOMIC_SEQ_CST) == tail)
                fwd_spin_then_park(&h->req_seq, seq, PARK_NS);
            __atomic_store_n(&h->server_parked, 0, __ATOMIC_RELAXED);
            continue;
        }
        /* Everything below is checked against our own copies: the client can
         * write anything into the ring at any time. */
        if (head - tail > ring || head < tail) {
            snprintf(why, whylen, "malformed request: the ring's head (%llu) is not within its size of the tail (%llu)",
                     (unsigned long long)head, (unsigned long long)tail);
            ok = false;
            break;
        }
        uint64_t off = tail & (ring - 1);
        struct krex_fwd_msg m; /* offsets are multiples of 8: 8 bytes remain at least */
        uint32_t size;
        uint16_t op;
        memcpy(&size, seg->ring + off, sizeof size);
        memcpy(&op, seg->ring + off + 4, sizeof op);
        if (op == KREX_FWD_PAD) {
            if (size != ring - off) {
                snprintf(why, whylen, "malformed request: a filler of %u bytes where %llu remain", size,
                         (unsigned long long)(ring - off));
                ok = false;
                break;
            }
            tail += size;
            goto consumed;
        }
        if (size < sizeof m || size % 8 != 0 || size > ring - off || size > head - tail) {
            snprintf(why, whylen, "malformed request at %llu: size %u (a request is at least %zu bytes, a multiple of "
                                  "8, and within the ring)",
                     (unsigned long long)off, size, sizeof m);
            ok = false;
            break;
        }
        if (size > ring / 4) {
            snprintf(why, whylen, "oversized request: %u bytes (at most %llu)", size, (unsigned long long)(ring / 4));
            ok = false;
            break;
        }
        memcpy(&m, seg->ring + off, sizeof m);
        if (m.nargs > KREX_FWD_MAX_ARGS || m.blob_len > size - sizeof m || fwd_op_name(m.op) == NULL) {
            snprintf(why, whylen, "malformed request at %llu: op %u, %u arguments, a %u-byte blob in %u bytes",
                     (unsigned long long)off, (unsigned)m.op, m.nargs, m.blob_len, size);
            ok = false;
            break;
        }
        if (m.blob_len > cap) {
            uint8_t *bigger = realloc(blob, m.blob_len);
            if (bigger == NULL) {
                snprintf(why, whylen, "out of memory for a %u-byte request", m.blob_len);
                ok = false;
                break;
            }
            blob = bigger;
            cap = m.blob_len;
        }
        memcpy(blob, seg->ring + off + sizeof m, m.blob_len);
        tail += size;
        if (!srv_execute(seg, &m, blob, why, whylen)) {
            char detail[300];
            snprintf(detail, sizeof detail, "malformed request: %.280s", why);
            snprintf(why, whylen, "%s", detail);
            ok = false;
            break;
        }
        h->calls_done++;
    consumed:
        __atomic_store_n(&h->req_tail, tail, __ATOMIC_RELEASE);
        __atomic_fetch_add(&h->space_seq, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&h->client_parked, __ATOMIC_SEQ_CST))
            fwd_futex_wake(&h->space_seq);
    }
    free(blob);
    return ok;
}

int main(void)
{
    uint64_t t0 = fwd_now_ns();
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives its runtime */
    prctl(PR_SET_DUMPABLE, 0);        /* a command of the same uid cannot ptrace it */
    struct sigaction bus = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};
    sigemptyset(&bus.sa_mask);
    sigaction(SIGBUS, &bus, NULL);
    char err[300];
    if (!srv_driver_open(err, sizeof err)) {
        say("failed %s", err);
        return 1;
    }
    say("ready %.1f", (double)(fwd_now_ns() - t0) / 1e6);
    for (;;) {
        char line[128];
        int fds[MAX_FDS];
        if (read_control(line, sizeof line, fds) != 0)
            return 0; /* the runtime closed the channel */
        int tenant = 0;
        unsigned long long ring = 0, staging = 0, pinned = 0;
        int fields = sscanf(line, "serve %d %llu %llu %llu", &tenant, &ring, &staging, &pinned);
        if (fields < 3 || fds[0] < 0 || (pinned > 0) != (fds[1] >= 0)) {
            close_fds(fds);
            say("failed an unexpected control line: %.60s", line);
            return 1;
        }
        struct fwd_segment seg;
        if (fwd_attach(fds[0], ring, staging, &seg, err, sizeof err) != 0) {
            close_fds(fds);
            say("failed the command's segment: %s", err);
            return 1;
        }
        void *arena = pinned > 0 ? map_arena(fds[1], pinned, err, sizeof err) : NULL;
        close_fds(fds);
        if (pinned > 0 && arena == NULL) {
            fwd_unmap(&seg);
            say("failed the command's pinned arena: %s", err);
            return 1;
        }
        guard(0, seg.h, seg.map_size);
        guard(1, arena, (size_t)pinned);
        srv_set_arena(arena, pinned);
        srv_set_tenant(tenant);
        say("serving");
        bool control_closed = false;
        char why[400] = "";
        bool served = serve(&seg, why, sizeof why, &control_closed);
        if (!served) {
            fail_segment(&seg, why);
            say("failed %s", why);
            /* The command goes on (its calls fail from now on) until it ends. */
            while (!control_closed) {
                char end[128];
                int extra[MAX_FDS];
                if (read_control(end, sizeof end, extra) != 0)
                    control_closed = true;
                close_fds(extra);
                if (strcmp(end, "end") == 0)
                    break;
            }
        } else {
            snprintf(seg.h->reason, sizeof seg.h->reason, "the command ended");
            __atomic_store_n(&seg.h->server_state, KREX_FWD_STATE_ENDED, __ATOMIC_RELEASE);
        }
        uint64_t c0 = fwd_now_ns();
        char cleaned[300];
        bool clean = srv_reset(cleaned, sizeof cleaned);
        srv_set_tenant(0);
        srv_set_arena(NULL, 0);
        unguard();
        fwd_unmap(&seg);
        if (arena != NULL)
            munmap(arena, (size_t)pinned);
        if (control_closed)
            return 0;
        if (!served) {
            /* A server that was sent garbage may have executed part of it. */
            say("clean retire it refused a request of its command: %s", why);
            return 3;
        }
        if (!clean) {
            say("clean retire %s", cleaned);
            return 3;
        }
        say("clean ok %.3f %s", (double)(fwd_now_ns() - c0) / 1e6, cleaned);
    }
}
