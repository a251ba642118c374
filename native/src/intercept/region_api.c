/*
 * krex_region_enter / krex_region_exit: the C side of the region channel.
 *
 * One Unix stream connection per process to the runtime (KREX_REGION_SOCKET),
 * opened at the first enter and kept; a text-line protocol, documented in
 * docs/native.md ("Region channel"):
 *   client: HELLO 2 <tenant_id> <pid> <token>  server: OK | ERROR <code> <reason>
 *           (2: KREX_REGION_PROTOCOL, region_protocol.h, generated from the Python constant)
 *   client: ENTER <tid>                        server: GRANTED <seq> | ERROR <code> <reason>
 *   client: EXIT [integrity=<counts> [timing=<summary>]] [staged=<n>]
 *                                              server: RELEASED <seq> | ERROR <code> <reason>
 * EXIT carries this process's measurement integrity for the region
 * (krex_region_integrity, intercept_integrity.c) and the driver's elapsed
 * times of its judged windows (krex_region_timing, intercept_timing.c), for
 * its certificate, and how many copies of page-locked memory forwarded
 * mode's client staged inside it (krex_forward_staged_copies: not the copies
 * the program timed).
 * The token is the tenant's secret from KREX_REGION_TOKEN; it goes nowhere
 * but the HELLO line. Closing the connection withdraws a queued request and
 * releases a held region, so a crashed tenant never keeps the GPU.
 */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "intercept_internal.h"
#include "krex.h"
#include "region_protocol.h"

/* The longest line the server sends, without its newline. */
#define REPLY_MAX 768 /* region_wire.MAX_LINE */

static pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER;
static int region_fd = -1;
static unsigned regions_entered; /* regions granted to this process, ever */
static pid_t region_pid;   /* the process that owns region_fd (fork check) */
static bool holding;
static unsigned long long staged_at_enter; /* forwarded mode's staged copies when the region was granted */
static char inbuf[REPLY_MAX + 256]; /* a whole reply line and its newline, with room to spare */
static size_t inlen;

static void disconnect(void)
{
    if (region_fd >= 0)
        close(region_fd);
    region_fd = -1;
    holding = false;
    inlen = 0;
}

static int send_line(const char *line)
{
    size_t len = strlen(line), off = 0;
    while (off < len) {
        ssize_t n = send(region_fd, line + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -(n < 0 ? errno : ECONNRESET);
        off += (size_t)n;
    }
    return 0;
}

/* Reads one line (without its newline) into out. */
static int recv_line(char *out, size_t size)
{
    for (;;) {
        char *nl = memchr(inbuf, '\n', inlen);
        if (nl != NULL) {
            size_t len = (size_t)(nl - inbuf);
            if (len >= size)
                return -EPROTO;
            memcpy(out, inbuf, len);
            out[len] = '\0';
            inlen -= len + 1;
            memmove(inbuf, nl + 1, inlen);
            return 0;
        }
        if (inlen == sizeof inbuf)
            return -EPROTO; /* a line longer than any the protocol has */
        ssize_t n = recv(region_fd, inbuf + inlen, sizeof inbuf - inlen, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -(n < 0 ? errno : ECONNRESET);
        inlen += (size_t)n;
    }
}

/* "ERROR <code> <reason>": code is an errno name; unknown names are -EPROTO. */
static int error_code(const char *line)
{
    static const struct {
        const char *name;
        int code;
    } codes[] = {
        {"EBUSY", EBUSY},       {"EINVAL", EINVAL},       {"EPERM", EPERM},   {"EACCES", EACCES},
        {"ETIMEDOUT", ETIMEDOUT}, {"ECANCELED", ECANCELED}, {"ESRCH", ESRCH},   {"EPROTO", EPROTO},
        {"EAGAIN", EAGAIN},     {"ENOENT", ENOENT},       {"ENODEV", ENODEV}, {"ESHUTDOWN", ESHUTDOWN},
        {"EMSGSIZE", EMSGSIZE},
    };
    char name[32] = "";
    if (sscanf(line, "ERROR %31s", name) != 1)
        return -EPROTO;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strcmp(codes[i].name, name) == 0)
            return -codes[i].code;
    return -EPROTO;
}

/* One request, one reply line; `want` is the success keyword. */
static int transact(const char *request, const char *want, char *reply, size_t size)
{
    int rc = send_line(request);
    if (rc == 0)
        rc = recv_line(reply, size);
    if (rc != 0) {
        disconnect();
        return rc;
    }
    size_t wl = strlen(want);
    if (strncmp(reply, want, wl) == 0 && (reply[wl] == '\0' || reply[wl] == ' '))
        return 0;
    if (strncmp(reply, "ERROR ", 6) == 0)
        return error_code(reply);
    disconnect(); /* out of step with the server: start over next time */
    return -EPROTO;
}

/* Between regions the server speaks only to answer: anything to read (its
 * word before closing an idle connection, or the close itself) means the
 * connection is over, and the next region opens a new one. */
static bool closed_by_server(void)
{
    struct pollfd p = {.fd = region_fd, .events = POLLIN};
    return inlen > 0 || poll(&p, 1, 0) != 0;
}

static int connect_channel(const char *path)
{
    if (region_fd >= 0 && region_pid == getpid() && !holding && closed_by_server())
        disconnect();
    if (region_fd >= 0 && region_pid == getpid())
        return 0;
    if (region_fd >= 0) {
        /* Forked: the connection is the parent's; leave it to the parent. */
        region_fd = -1;
        holding = false;
        inlen = 0;
    }
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return -ENAMETOOLONG;
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    while (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        if (errno == EINTR)
            continue;
        int err = errno;
        close(fd);
        return -err;
    }
    region_fd = fd;
    region_pid = getpid();
    const char *tenant = getenv(KREX_ENV_TENANT_ID);
    const char *token = getenv(KREX_ENV_REGION_TOKEN);
    char hello[256], reply[REPLY_MAX + 1];
    int len = snprintf(hello, sizeof hello, "HELLO %d %s %d %s\n", KREX_REGION_PROTOCOL,
                       tenant && *tenant ? tenant : "-1", (int)getpid(), token && *token ? token : "-");
    /* Longer than any valid HELLO: the environment is not the runtime's. */
    int rc = len < 0 || (size_t)len >= sizeof hello ? -EINVAL : transact(hello, "OK", reply, sizeof reply);
    if (rc != 0)
        disconnect();
    return rc;
}

/* Copies of page-locked memory that forwarded mode's client staged so far in
 * this process (not the one DMA the program asked for); 0 when the driver
 * loaded is not that client. */
static unsigned long long forward_staged_copies(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (h == NULL)
        return 0;
    unsigned long long (*staged)(void) = (unsigned long long (*)(void))dlsym(h, "krex_forward_staged_copies");
    unsigned long long n = staged != NULL ? staged() : 0;
    dlclose(h);
    return n;
}

KREX_EXPORT int krex_region_enter(void)
{
    const char *path = getenv(KREX_ENV_REGION_SOCKET);
    if (path == NULL || *path == '\0')
        return 0; /* not under the runtime: the candidate runs standalone */
    pthread_mutex_lock(&region_lock);
    int rc = connect_channel(path);
    if (rc == 0 && holding)
        rc = -EBUSY;
    if (rc == 0) {
        char request[64], reply[REPLY_MAX + 1];
        snprintf(request, sizeof request, "ENTER %ld\n", (long)syscall(SYS_gettid));
        rc = transact(request, "GRANTED", reply, sizeof reply);
        holding = rc == 0;
        if (holding) {
            __atomic_fetch_add(&regions_entered, 1, __ATOMIC_RELEASE);
            staged_at_enter = forward_staged_copies();
        }
    }
    pthread_mutex_unlock(&region_lock);
    return rc;
}

KREX_EXPORT int krex_regions_entered(void)
{
    return (int)__atomic_load_n(&regions_entered, __ATOMIC_ACQUIRE);
}

KREX_EXPORT int krex_region_exit(void)
{
    const char *path = getenv(KREX_ENV_REGION_SOCKET);
    if (path == NULL || *path == '\0')
        return 0;
    pthread_mutex_lock(&region_lock);
    int rc;
    if (region_fd < 0 || region_pid != getpid() || !holding) {
        rc = -EINVAL;
    } else {
        char reply[REPLY_MAX + 1], counts[128] = "", timing[256] = "", request[480];
        /* Only while the gate says the region is ours: without a gate there
         * are no timed windows to speak of (and a plain EXIT is what was always sent). */
        bool judged = krex_current_region() != 0 && krex_region_integrity(counts, sizeof counts) > 0;
        bool timed = judged && krex_region_timing(timing, sizeof timing) > 0;
        /* Staged copies inside the region are not the copies the program timed. */
        unsigned long long staged = forward_staged_copies() - staged_at_enter;
        char staged_word[40] = "";
        if (staged > 0)
            snprintf(staged_word, sizeof staged_word, " staged=%llu", staged);
        snprintf(request, sizeof request, "EXIT%s%s%s%s%s\n", judged ? " integrity=" : "", judged ? counts : "",
                 timed ? " timing=" : "", timed ? timing : "", staged_word);
        rc = transact(request, "RELEASED", reply, sizeof reply);
        holding = false; /* whatever the answer, the server no longer counts us as holder */
    }
    pthread_mutex_unlock(&region_lock);
    return rc;
}
