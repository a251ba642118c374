/*
 * The shared simulated device: a POSIX shared-memory file that every process
 * using the simulator maps, holding the device descriptions and one slot per
 * process. Contention is processor sharing: while n items are active on a
 * device, each progresses at rate 1/n, so the counters that matter are "how
 * many items are active on device d right now", summed over live processes.
 */
#include "simcuda_internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t attach_mu = PTHREAD_MUTEX_INITIALIZER;
static bool initialized;   /* cuInit succeeded in this process */
static bool forked_child;  /* we are a fork of an initialised process */

/* How long a kernel advances between two looks at the active count. Short
 * enough that a contender arriving or leaving is noticed quickly, long enough
 * that many concurrent kernels do not eat the CPU. */
#define SIM_QUANTUM_NS 100000.0
/* Dead processes are looked for at most this often by each process. */
#define SIM_REAP_INTERVAL_NS 20000000ull

uint64_t sim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};
    /* An interrupted sleep is fine: callers measure the time that passed. */
    clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
}

/* Host-side latency of a driver call (context creation, module loading), read
 * at every call so a program can set it for its own next call. The thread
 * sleeps inside the call, as a real driver keeps it there: the gate and the
 * checkpoint lock see it inside. */
void sim_host_latency(const char *env_name)
{
    const char *s = getenv(env_name);
    if (!s || !*s)
        return;
    char *end;
    unsigned long ms = strtoul(s, &end, 10);
    if (*end || ms > 600000ul) {
        fprintf(stderr, "krex simulated CUDA driver: ignoring %s=%s (expected 0..600000 ms)\n", env_name, s);
        return;
    }
    sleep_ns((uint64_t)ms * 1000000ull);
}

void sim_futex_wait(uint32_t *word, uint32_t expected, uint64_t timeout_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(timeout_ns / 1000000000ull),
                          .tv_nsec = (long)(timeout_ns % 1000000000ull)};
    syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

void sim_futex_wake_all(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* A slot's counters start from zero for each owner: a new owner must not
 * inherit the devices and work of the process that held the slot before. */
static void clear_counters(struct krex_sim_proc_slot *slot)
{
    memset(slot->active, 0, sizeof slot->active);
    memset(slot->mem_used, 0, sizeof slot->mem_used);
    memset(slot->work_items, 0, sizeof slot->work_items);
    __atomic_store_n(&slot->devices_used, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->last_work_ns, 0, __ATOMIC_RELAXED);
}

/* What the dead owner of a slot did, into the ring of reaped records, before
 * its counters go: the work of a process that ended stays visible. */
static void keep_reaped(const struct krex_sim_proc_slot *slot, int pid)
{
    uint32_t used = __atomic_load_n(&slot->devices_used, __ATOMIC_RELAXED);
    if (!used)
        return; /* it ran nothing */
    struct krex_sim_shm *shm = sim_proc.shm;
    uint64_t n = __atomic_fetch_add(&shm->reaped_seq, 1, __ATOMIC_ACQ_REL);
    struct krex_sim_reaped *r = &shm->reaped[n % KREX_SIM_REAPED_MAX];
    __atomic_store_n(&r->seq, 0, __ATOMIC_RELEASE);
    r->pid = pid;
    r->tenant_id = slot->tenant_id;
    r->start_time = __atomic_load_n(&slot->start_time, __ATOMIC_RELAXED);
    r->last_work_ns = __atomic_load_n(&slot->last_work_ns, __ATOMIC_RELAXED);
    r->devices_used = used;
    for (int d = 0; d < KREX_SIM_MAX_DEVICES; d++)
        r->work_items[d] = __atomic_load_n(&slot->work_items[d], __ATOMIC_RELAXED);
    __atomic_store_n(&r->seq, n + 1, __ATOMIC_RELEASE);
}

/* Takes a dead process's slot back. The CAS to BUSY makes exactly one reaper
 * (or claimer) own the slot while its counters are cleared. */
static void reap_slot(struct krex_sim_proc_slot *slot, int pid)
{
    int32_t expected = pid;
    if (!__atomic_compare_exchange_n(&slot->pid, &expected, KREX_SIM_SLOT_BUSY, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED))
        return;
    keep_reaped(slot, pid);
    clear_counters(slot);
    __atomic_store_n(&slot->inflight, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&slot->in_call, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&slot->lock_word, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&slot->locker_pid, 0, __ATOMIC_RELEASE);
    /* A locker waiting for this process to drain must re-check now. */
    __atomic_add_fetch(&slot->drain_seq, 1, __ATOMIC_ACQ_REL);
    sim_futex_wake_all(&slot->drain_seq);
    __atomic_store_n(&slot->pid, KREX_SIM_SLOT_FREE, __ATOMIC_RELEASE);
}

static bool slot_has_work(const struct krex_sim_proc_slot *slot)
{
    if (__atomic_load_n(&slot->inflight, __ATOMIC_RELAXED))
        return true;
    for (int d = 0; d < KREX_SIM_MAX_DEVICES; d++)
        if (__atomic_load_n(&slot->active[d], __ATOMIC_RELAXED))
            return true;
    return false;
}

/* all = false: only slots that still count work (the frequent, cheap pass). */
static void reap_dead(bool all)
{
    struct krex_sim_shm *shm = sim_proc.shm;
    for (int i = 0; i < KREX_SIM_MAX_PROCS; i++) {
        struct krex_sim_proc_slot *slot = &shm->procs[i];
        int pid = __atomic_load_n(&slot->pid, __ATOMIC_ACQUIRE);
        if (pid <= 0 || pid == sim_proc.pid)
            continue;
        if (!all && !slot_has_work(slot))
            continue;
        if (!sim_slot_alive(slot, pid))
            reap_slot(slot, pid);
    }
}

static void maybe_reap(void)
{
    static uint64_t last_reap; /* shared by this process's threads */
    uint64_t now = sim_now_ns();
    uint64_t last = __atomic_load_n(&last_reap, __ATOMIC_RELAXED);
    if (now - last < SIM_REAP_INTERVAL_NS)
        return;
    if (!__atomic_compare_exchange_n(&last_reap, &last, now, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return; /* another thread of ours is reaping */
    reap_dead(false);
}

struct krex_sim_proc_slot *sim_find_slot(int pid)
{
    if (!sim_proc.shm || pid <= 0)
        return NULL;
    for (int i = 0; i < KREX_SIM_MAX_PROCS; i++) {
        struct krex_sim_proc_slot *slot = &sim_proc.shm->procs[i];
        /* A dead earlier owner of a reused pid may still hold a slot: keep looking. */
        if (__atomic_load_n(&slot->pid, __ATOMIC_ACQUIRE) == pid && sim_slot_alive(slot, pid))
            return slot;
    }
    return NULL;
}

uint32_t sim_device_active(int phys)
{
    maybe_reap();
    uint32_t total = 0;
    for (int i = 0; i < KREX_SIM_MAX_PROCS; i++) {
        struct krex_sim_proc_slot *slot = &sim_proc.shm->procs[i];
        if (__atomic_load_n(&slot->pid, __ATOMIC_ACQUIRE) > 0)
            total += __atomic_load_n(&slot->active[phys], __ATOMIC_RELAXED);
    }
    return total;
}

uint64_t sim_device_mem_used(int phys)
{
    maybe_reap();
    uint64_t total = 0;
    for (int i = 0; i < KREX_SIM_MAX_PROCS; i++) {
        struct krex_sim_proc_slot *slot = &sim_proc.shm->procs[i];
        if (__atomic_load_n(&slot->pid, __ATOMIC_ACQUIRE) > 0)
            total += __atomic_load_n(&slot->mem_used[phys], __ATOMIC_RELAXED);
    }
    return total;
}

void sim_device_run(int phys, uint64_t solo_ns, bool at_sm_clock)
{
    if (solo_ns == 0)
        return;
    uint32_t *mine = &sim_proc.slot->active[phys];
    __atomic_add_fetch(mine, 1, __ATOMIC_ACQ_REL);
    __atomic_or_fetch(&sim_proc.slot->devices_used, 1u << phys, __ATOMIC_RELAXED);
    __atomic_store_n(&sim_proc.slot->last_work_ns, sim_now_ns(), __ATOMIC_RELAXED);
    __atomic_add_fetch(&sim_proc.slot->work_items[phys], 1, __ATOMIC_RELEASE);
    double remaining = (double)solo_ns;
    uint64_t last = sim_now_ns();
    sim_heat_step(phys, last); /* the idle spell before this item, if any, cools the device */
    while (remaining > 0.0) {
        uint32_t n = sim_device_active(phys);
        double share = n > 1 ? (double)n : 1.0;
        /* The rate of this item's progress: its share of the device, at the clock's share of the top clock. */
        double rate = at_sm_clock ? (double)sim_heat_clock(phys) / KREX_SIM_TOP_SM_CLOCK_MHZ / share : 1.0 / share;
        double wall = remaining / rate;
        sleep_ns((uint64_t)(wall < SIM_QUANTUM_NS ? wall : SIM_QUANTUM_NS));
        uint64_t now = sim_now_ns();
        remaining -= (double)(now - last) * rate;
        sim_heat_busy(phys, (uint64_t)((double)(now - last) / share));
        sim_heat_step(phys, now);
        last = now;
    }
    __atomic_sub_fetch(mine, 1, __ATOMIC_ACQ_REL);
}

uint64_t sim_copy_solo_ns(uint64_t bytes)
{
    uint32_t mbps = sim_proc.shm->copy_mbps ? sim_proc.shm->copy_mbps : KREX_SIM_DEFAULT_COPY_MBPS;
    /* bytes / (mbps * 1e6 B/s) seconds = bytes * 1000 / mbps ns */
    return (uint64_t)((double)bytes * 1000.0 / (double)mbps);
}

/* ---- creating / attaching the shared device -------------------------------- */

static unsigned env_unsigned(const char *name, unsigned fallback, unsigned lo, unsigned hi)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return fallback;
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "krex simulated CUDA driver: ignoring %s=%s (expected %u..%u)\n", name, s, lo, hi);
        return fallback;
    }
    return (unsigned)v;
}

static uint64_t fnv1a(const char *s, uint64_t seed)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

static void init_device(struct krex_sim_device_info *dev, const char *shm_name, int index, uint64_t mem)
{
    char key[300];
    snprintf(key, sizeof key, "krex-sim/%s/%d", shm_name, index);
    uint64_t a = fnv1a(key, 0), b = fnv1a(key, 0x9e3779b97f4a7c15ull);
    memcpy(dev->uuid, &a, 8);
    memcpy(dev->uuid + 8, &b, 8);
    dev->uuid[6] = (uint8_t)((dev->uuid[6] & 0x0f) | 0x40); /* looks like a v4 UUID */
    dev->uuid[8] = (uint8_t)((dev->uuid[8] & 0x3f) | 0x80);
    snprintf(dev->name, sizeof dev->name, "KREX Simulated GPU %d (simulator, not a GPU)", index);
    dev->total_mem = mem;
}

static void init_shm(struct krex_sim_shm *shm, const char *name)
{
    memset(shm, 0, sizeof *shm);
    shm->num_devices = env_unsigned(KREX_SIM_ENV_GPUS, 1, 1, KREX_SIM_MAX_DEVICES);
    shm->max_procs = KREX_SIM_MAX_PROCS;
    shm->copy_mbps = env_unsigned(KREX_SIM_ENV_COPY_MBPS, KREX_SIM_DEFAULT_COPY_MBPS, 1, 100000000);
    uint64_t mem = (uint64_t)env_unsigned(KREX_SIM_ENV_MEM_MB, KREX_SIM_DEFAULT_MEM_MB, 1, 1u << 30) << 20;
    for (uint32_t i = 0; i < shm->num_devices; i++)
        init_device(&shm->devices[i], name, (int)i, mem);
    shm->version = KREX_SIM_SHM_VERSION;
    shm->magic = KREX_SIM_SHM_MAGIC;
    __atomic_store_n(&shm->ready, 1, __ATOMIC_RELEASE);
}

/* A device file outlives the runtime that made it: a later runtime that
 * serves more GPUs of the same simulated device (KREX_SIM_GPUS) finds it
 * with fewer, and its tenants on the extra GPUs would fail cuInit. Devices
 * are only ever added (under the file's lock), never removed or renumbered,
 * so processes still using the file see the same devices as before. */
static void grow_devices(struct krex_sim_shm *shm, const char *name)
{
    unsigned wanted = env_unsigned(KREX_SIM_ENV_GPUS, 0, 1, KREX_SIM_MAX_DEVICES);
    uint32_t have = __atomic_load_n(&shm->num_devices, __ATOMIC_ACQUIRE);
    if (wanted <= have)
        return;
    uint64_t mem = have ? shm->devices[0].total_mem
                        : (uint64_t)env_unsigned(KREX_SIM_ENV_MEM_MB, KREX_SIM_DEFAULT_MEM_MB, 1, 1u << 30) << 20;
    for (uint32_t i = have; i < wanted; i++)
        init_device(&shm->devices[i], name, (int)i, mem);
    __atomic_store_n(&shm->num_devices, wanted, __ATOMIC_RELEASE);
}

static const char *device_name(void)
{
    const char *name = getenv(KREX_SIM_ENV_DEVICE);
    return (name && *name) ? name : KREX_SIM_DEFAULT_DEVICE_NAME;
}

/* Creation is serialised with flock() on the file itself: the first process
 * to hold the lock sizes and initialises it; a creator that dies mid-way
 * releases the lock and leaves ready == 0, so the next one initialises. */
static CUresult attach_locked(void)
{
    const char *name = device_name();
    if (strchr(name, '/') || strlen(name) > 200) {
        fprintf(stderr, "krex simulated CUDA driver: invalid %s=%s\n", KREX_SIM_ENV_DEVICE, name);
        return CUDA_ERROR_INVALID_VALUE;
    }
    char path[256];
    snprintf(path, sizeof path, "%s%s", KREX_SIM_SHM_PREFIX, name);
    int fd = shm_open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        fprintf(stderr, "krex simulated CUDA driver: shm_open(%s): %s\n", path, strerror(errno));
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    /* No fchmod: a runtime makes its device file itself, open to its tenants'
     * group only (krex_runtime/sim/device_file.py, fresh_device); one made here
     * by a process alone keeps its creator's umask. */
    CUresult rc = CUDA_SUCCESS;
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR)
        ;
    struct stat st;
    if (fstat(fd, &st) != 0 || (st.st_size < (off_t)sizeof(struct krex_sim_shm) &&
                                ftruncate(fd, (off_t)sizeof(struct krex_sim_shm)) != 0)) {
        fprintf(stderr, "krex simulated CUDA driver: sizing %s: %s\n", path, strerror(errno));
        rc = CUDA_ERROR_OPERATING_SYSTEM;
        goto out;
    }
    void *map = mmap(NULL, sizeof(struct krex_sim_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        fprintf(stderr, "krex simulated CUDA driver: mmap %s: %s\n", path, strerror(errno));
        rc = CUDA_ERROR_OPERATING_SYSTEM;
        goto out;
    }
    struct krex_sim_shm *shm = map;
    if (!__atomic_load_n(&shm->ready, __ATOMIC_ACQUIRE)) {
        init_shm(shm, name);
    } else if (shm->magic != KREX_SIM_SHM_MAGIC || shm->version != KREX_SIM_SHM_VERSION ||
               shm->max_procs != KREX_SIM_MAX_PROCS) {
        fprintf(stderr,
                "krex simulated CUDA driver: %s%s has another layout (version %u); "
                "remove it when no process uses it\n",
                KREX_SIM_SHM_DIR, path, shm->version);
        munmap(map, sizeof(struct krex_sim_shm));
        rc = CUDA_ERROR_INVALID_DEVICE;
        goto out;
    }
    grow_devices(shm, name);
    sim_heat_enable_from_env(shm);
    __atomic_store_n(&sim_proc.shm, shm, __ATOMIC_RELEASE);
out:
    flock(fd, LOCK_UN);
    close(fd);
    return rc;
}

CUresult sim_attach(void)
{
    if (__atomic_load_n(&sim_proc.shm, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&attach_mu);
    CUresult rc = sim_proc.shm ? CUDA_SUCCESS : attach_locked();
    pthread_mutex_unlock(&attach_mu);
    return rc;
}

static void format_uuid(const uint8_t *u, char *out, size_t len)
{
    snprintf(out, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
}

/* CUDA_VISIBLE_DEVICES like the real driver: a comma-separated list of
 * indices or GPU-<uuid> prefixes; the list ends at the first entry that is
 * invalid, out of range or repeated. Unset means every device. */
static void compute_visible(void)
{
    int n = (int)sim_proc.shm->num_devices;
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    sim_proc.visible_count = 0;
    if (!env) {
        for (int i = 0; i < n; i++)
            sim_proc.visible[sim_proc.visible_count++] = i;
        return;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", env);
    bool used[KREX_SIM_MAX_DEVICES] = {false};
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok))
            tok++;
        size_t len = strlen(tok);
        while (len && isspace((unsigned char)tok[len - 1]))
            tok[--len] = '\0';
        int index = -1;
        if (strncmp(tok, "GPU-", 4) == 0 && len > 4) {
            for (int i = 0; i < n; i++) {
                char uuid[64];
                format_uuid(sim_proc.shm->devices[i].uuid, uuid, sizeof uuid);
                if (strncmp(uuid, tok, len) == 0) {
                    index = i;
                    break;
                }
            }
        } else {
            char *end;
            long v = strtol(tok, &end, 10);
            if (len && !*end && v >= 0 && v < n)
                index = (int)v;
        }
        if (index < 0 || used[index])
            break;
        used[index] = true;
        sim_proc.visible[sim_proc.visible_count++] = index;
    }
}

static CUresult claim_slot(void)
{
    uint64_t start_time = 0;
    char state;
    sim_read_proc_stat(sim_proc.pid, &state, &start_time);
    for (int attempt = 0; attempt < 2; attempt++) {
        for (int i = 0; i < KREX_SIM_MAX_PROCS; i++) {
            struct krex_sim_proc_slot *slot = &sim_proc.shm->procs[i];
            int32_t expected = KREX_SIM_SLOT_FREE;
            if (!__atomic_compare_exchange_n(&slot->pid, &expected, KREX_SIM_SLOT_BUSY, false,
                                             __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
                continue;
            clear_counters(slot);
            slot->lock_word = 0;
            slot->locker_pid = 0;
            slot->in_call = 0;
            slot->inflight = 0;
            slot->tenant_id = sim_proc.tenant_id;
            __atomic_store_n(&slot->start_time, start_time, __ATOMIC_RELEASE);
            __atomic_store_n(&slot->pid, sim_proc.pid, __ATOMIC_RELEASE);
            /* Threads already inside the driver may read it without the mutex. */
            __atomic_store_n(&sim_proc.slot, slot, __ATOMIC_RELEASE);
            return CUDA_SUCCESS;
        }
        reap_dead(true);
    }
    fprintf(stderr, "krex simulated CUDA driver: all %d process slots are in use\n", KREX_SIM_MAX_PROCS);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static void after_fork_in_child(void)
{
    /* Like the real driver: a child of an initialised process cannot use CUDA.
     * Our slot belongs to the parent; never touch it from here. */
    if (initialized)
        forked_child = true;
}

CUresult sim_init(void)
{
    if (forked_child)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (__atomic_load_n(&initialized, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    CUresult rc = sim_attach();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&attach_mu);
    if (!initialized) {
        sim_proc.pid = (int)getpid();
        const char *tenant = getenv(KREX_SIM_ENV_TENANT);
        sim_proc.tenant_id = tenant ? (int)strtol(tenant, NULL, 10) : 0;
        compute_visible();
        rc = claim_slot();
        if (rc == CUDA_SUCCESS) {
            static bool atfork_registered;
            if (!atfork_registered)
                pthread_atfork(NULL, NULL, after_fork_in_child);
            atfork_registered = true;
            __atomic_store_n(&initialized, true, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&attach_mu);
    return rc;
}

bool sim_initialized(void)
{
    return __atomic_load_n(&initialized, __ATOMIC_ACQUIRE) && !forked_child;
}

bool sim_forked(void)
{
    return forked_child;
}
