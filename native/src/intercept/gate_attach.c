/*
 * The gate file of this process's GPU, or of each GPU of its set
 * (KREX_GATE_SET): attaching it (mapping the file the runtime created
 * read-only, checking its layout, mapping this tenant's entries file) and
 * claiming this process's entry in the latter. The layer under the gate client (gate.c) and the drain helper (drain.c),
 * which both read the mapping; it calls neither.
 *
 * A missing, foreign or malformed gate file means "run ungated" (said once on
 * stderr): nothing here may hang a tenant because of the runtime.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "intercept_internal.h"

enum { GATE_UNKNOWN = 0, GATE_ATTACHED = 1, GATE_NONE = 2 };

/* One gate per GPU of the tenant's placement: one, or a set (KREX_GATE_SET). */
struct attached_gate {
    const struct krex_gate_header *header; /* mapped read-only */
    char *entries;                         /* this tenant's entries file, mapped read-write */
    unsigned n_entries;
    struct krex_gate_proc *self;           /* our entry, once registered */
};

static int gate_status;                   /* GATE_*, settled once per process */
static struct attached_gate gates[KREX_GATE_SET_MAX];
static unsigned n_gates;                  /* set once attached, never changes after */
static struct krex_gate_proc *self_entry; /* our entry in the first gate, once registered */
static int64_t my_tenant = KREX_GATE_NO_HOLDER;
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- attaching ------------------------------------------------------------ */

/* The header, read-only: only the runtime moves the gate. NULL when unusable. */
static const struct krex_gate_header *map_header(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        krex_log("cannot open gate %s: %s; running ungated", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct krex_gate_header))
        m = mmap(NULL, sizeof(struct krex_gate_header), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        krex_log("cannot map gate %s; running ungated", path);
        return NULL;
    }
    const struct krex_gate_header *h = m;
    bool ok = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == KREX_GATE_MAGIC &&
              h->version == KREX_GATE_VERSION && h->header_size == sizeof(struct krex_gate_header) &&
              h->proc_size == sizeof(struct krex_gate_proc) && h->max_procs > 0;
    if (!ok) {
        krex_log("gate %s has another layout (version %u, this library %u); running ungated", path,
                 h->version, KREX_GATE_VERSION);
        munmap(m, sizeof(struct krex_gate_header));
        return NULL;
    }
    return h;
}

/* This tenant's entries file, read-write: the only part of the gate a tenant
 * writes. Returns the number of entries mapped at *out, 0 when unusable. */
static unsigned map_entries(const char *path, long long t, const struct krex_gate_header *h, char **out)
{
    char name[4096];
    if (snprintf(name, sizeof name, KREX_GATE_ENTRIES_FMT, path, t) >= (int)sizeof name)
        return 0;
    int fd = open(name, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        krex_log("cannot open this tenant's gate entries %s: %s; running ungated", name, strerror(errno));
        return 0;
    }
    struct stat st;
    uint64_t want = (uint64_t)h->procs_offset + (uint64_t)h->max_procs * h->proc_size;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= want)
        m = mmap(NULL, (size_t)want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        krex_log("cannot map this tenant's gate entries %s; running ungated", name);
        return 0;
    }
    *out = m;
    return h->max_procs;
}

/* One gate of the set into gates[i]; false when unusable (said on stderr). */
static bool attach_one(const char *path, long long t, unsigned i)
{
    const struct krex_gate_header *h = map_header(path);
    if (h == NULL)
        return false;
    char *e = NULL;
    unsigned n = map_entries(path, t, h, &e);
    if (n == 0) {
        munmap((void *)h, sizeof(struct krex_gate_header));
        return false;
    }
    gates[i].header = h;
    gates[i].entries = e;
    gates[i].n_entries = n;
    return true;
}

static void detach_all(void)
{
    for (unsigned i = 0; i < n_gates; i++) {
        const struct krex_gate_header *h = gates[i].header;
        munmap(gates[i].entries, (size_t)h->procs_offset + (size_t)gates[i].n_entries * h->proc_size);
        munmap((void *)h, sizeof(struct krex_gate_header));
    }
    n_gates = 0;
}

/* Every gate of the placement, or none: a tenant half under its gates could
 * submit to a GPU whose region it should wait for. */
static bool attach(void)
{
    const char *path = getenv(KREX_ENV_GATE_PATH);
    if (path == NULL || *path == '\0')
        return false;
    const char *tenant = getenv(KREX_ENV_TENANT_ID);
    char *end = NULL;
    long long t = tenant ? strtoll(tenant, &end, 10) : 0;
    if (tenant == NULL || end == tenant || *end != '\0') {
        krex_log("%s is set but %s is not an integer; running ungated", KREX_ENV_GATE_PATH, KREX_ENV_TENANT_ID);
        return false;
    }
    const char *set = getenv(KREX_ENV_GATE_SET);
    char paths[8192];
    if (snprintf(paths, sizeof paths, "%s", set != NULL && *set != '\0' ? set : path) >= (int)sizeof paths) {
        krex_log("%s is too long; running ungated", KREX_ENV_GATE_SET);
        return false;
    }
    char *save = NULL;
    for (char *p = strtok_r(paths, ":", &save); p != NULL; p = strtok_r(NULL, ":", &save)) {
        if (n_gates == KREX_GATE_SET_MAX) {
            krex_log("%s names more than %u gates; running ungated", KREX_ENV_GATE_SET, KREX_GATE_SET_MAX);
            detach_all();
            return false;
        }
        if (!attach_one(p, t, n_gates)) {
            detach_all();
            return false;
        }
        n_gates++;
    }
    if (n_gates == 0)
        return false;
    my_tenant = t;
    return true;
}

/* ---- process entries ------------------------------------------------------ */

/* Field 22 of /proc/<pid>/stat: start time in clock ticks since boot; with the
 * pid it names a process for good (pids are reused, start times are not). */
static uint64_t start_time_of(int pid)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    char *p = strrchr(text, ')'); /* the command name may hold spaces */
    if (p == NULL)
        return 0;
    /* after ")": field 3 is the state; field 22 is 19 fields further */
    for (int field = 2; field < 22 && p != NULL; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static bool entry_is_dead(const struct krex_gate_proc *e)
{
    int pid = __atomic_load_n(&e->pid, __ATOMIC_RELAXED);
    if (pid <= 0)
        return true;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return true;
    uint64_t st = start_time_of(pid);
    return st != 0 && st != e->start_time;
}

static struct krex_gate_proc *entry_at(const struct attached_gate *g, unsigned i)
{
    return (struct krex_gate_proc *)(g->entries + g->header->procs_offset + (size_t)i * g->header->proc_size);
}

static void fill(struct krex_gate_proc *e, int pid, uint64_t start_time)
{
    /* Everything but state, which we own (CLAIMING) until we publish LIVE. */
    memset((char *)e + sizeof e->state, 0, sizeof *e - sizeof e->state);
    e->pid = pid;
    e->tenant_id = my_tenant;
    e->start_time = start_time;
    __atomic_store_n(&e->state, KREX_PROC_LIVE, __ATOMIC_RELEASE);
}

static struct krex_gate_proc *claim_entry(const struct attached_gate *g, int pid, uint64_t st)
{
    /* First pass: a free entry. Second pass: reap the entry of a dead process. */
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned i = 0; i < g->n_entries; i++) {
            struct krex_gate_proc *e = entry_at(g, i);
            uint32_t want = pass == 0 ? KREX_PROC_FREE : KREX_PROC_LIVE;
            if (__atomic_load_n(&e->state, __ATOMIC_ACQUIRE) != want)
                continue;
            if (pass == 1 && !entry_is_dead(e))
                continue;
            if (__atomic_compare_exchange_n(&e->state, &want, KREX_PROC_CLAIMING, false, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
                fill(e, pid, st);
                return e;
            }
        }
    }
    krex_log("this tenant's gate entries are full (%u processes); this process runs ungated", g->n_entries);
    return NULL;
}

/* An entry in every gate, or none (those taken are given back). */
static bool claim_entries(void)
{
    int pid = (int)getpid();
    uint64_t st = start_time_of(pid);
    for (unsigned i = 0; i < n_gates; i++) {
        gates[i].self = claim_entry(&gates[i], pid, st);
        if (gates[i].self == NULL) {
            for (unsigned j = 0; j < i; j++) {
                __atomic_store_n(&gates[j].self->state, KREX_PROC_FREE, __ATOMIC_RELEASE);
                gates[j].self = NULL;
            }
            return false;
        }
    }
    return true;
}

struct krex_gate_proc *krex_gate_register(bool *registered_now)
{
    *registered_now = false;
    struct krex_gate_proc *e = __atomic_load_n(&self_entry, __ATOMIC_ACQUIRE);
    if (e != NULL || __atomic_load_n(&gate_status, __ATOMIC_ACQUIRE) == GATE_NONE)
        return e;
    pthread_mutex_lock(&attach_lock);
    if (gate_status == GATE_UNKNOWN)
        __atomic_store_n(&gate_status, attach() ? GATE_ATTACHED : GATE_NONE, __ATOMIC_RELEASE);
    if (gate_status == GATE_ATTACHED && self_entry == NULL) {
        if (claim_entries()) {
            __atomic_store_n(&self_entry, gates[0].self, __ATOMIC_RELEASE);
            *registered_now = true;
        } else {
            __atomic_store_n(&gate_status, GATE_NONE, __ATOMIC_RELEASE);
        }
    }
    e = self_entry;
    pthread_mutex_unlock(&attach_lock);
    return e;
}

struct krex_gate_proc *krex_gate_self(void)
{
    return __atomic_load_n(&self_entry, __ATOMIC_ACQUIRE);
}

const struct krex_gate_header *krex_gate_header(void)
{
    return gate_status == GATE_ATTACHED ? gates[0].header : NULL;
}

unsigned krex_gate_count(void)
{
    return __atomic_load_n(&self_entry, __ATOMIC_ACQUIRE) != NULL ? n_gates : 0;
}

const struct krex_gate_header *krex_gate_header_at(unsigned i)
{
    return i < krex_gate_count() ? gates[i].header : NULL;
}

struct krex_gate_proc *krex_gate_self_at(unsigned i)
{
    return i < krex_gate_count() ? gates[i].self : NULL;
}

int64_t krex_gate_tenant(void)
{
    return my_tenant;
}

/* The child shares the parent's mapping but is another process: it claims an
 * entry of its own at its first gated call. */
void krex_gate_attach_after_fork(void)
{
    pthread_mutex_init(&attach_lock, NULL);
    __atomic_store_n(&self_entry, NULL, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < n_gates; i++)
        gates[i].self = NULL;
}

/* The region this tenant holds now (the gate's generation while it holds
 * it), or 0 (also when not under a gate): what an event record, a launch and
 * the region API file their bookkeeping under. */
uint64_t krex_current_region(void)
{
    /* A region over a set holds every gate of it: the first one says. */
    const struct krex_gate_header *gate = krex_gate_header();
    if (gate == NULL)
        return 0;
    uint32_t word = __atomic_load_n(&gate->gate_word, __ATOMIC_SEQ_CST);
    if (!(word & KREX_GATE_CLOSED) || __atomic_load_n(&gate->holder, __ATOMIC_SEQ_CST) != krex_gate_tenant())
        return 0;
    return __atomic_load_n(&gate->generation, __ATOMIC_SEQ_CST);
}
