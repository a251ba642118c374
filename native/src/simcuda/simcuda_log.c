/*
 * Execution log: the ground truth tests check against. One fixed-size record
 * per write() on an O_APPEND descriptor, so concurrent processes never
 * interleave partial records.
 */
#include "simcuda_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_fd = -1;
static int32_t log_tenant;

static void open_log(void)
{
    const char *path = getenv(KREX_SIM_ENV_LOG);
    if (!path || !*path)
        return;
    log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (log_fd < 0)
        fprintf(stderr, "krex simulated CUDA driver: cannot open %s=%s: %s\n", KREX_SIM_ENV_LOG, path,
                strerror(errno));
}

static void load_config(void)
{
    const char *tenant = getenv(KREX_SIM_ENV_TENANT);
    log_tenant = tenant ? (int32_t)strtol(tenant, NULL, 10) : 0;
    open_log();
}

void sim_log_fill_common(struct krex_sim_log_record *rec, uint16_t kind)
{
    memset(rec, 0, sizeof *rec);
    rec->magic = KREX_SIM_LOG_MAGIC;
    rec->version = KREX_SIM_LOG_VERSION;
    rec->kind = kind;
    rec->pid = (int32_t)getpid();
    pthread_once(&log_once, load_config);
    rec->tenant_id = __atomic_load_n(&log_tenant, __ATOMIC_RELAXED);
    rec->device = -1;
}

void sim_log_record(const struct krex_sim_log_record *rec)
{
    pthread_once(&log_once, load_config);
    if (log_fd < 0)
        return;
    /* Records are 128 bytes: far below PIPE_BUF, and O_APPEND writes of a
     * regular file are atomic with respect to each other on Linux. */
    ssize_t n;
    do
        n = write(log_fd, rec, sizeof *rec);
    while (n < 0 && errno == EINTR);
}

/* A context server of forwarded mode runs the work of one command at a time:
 * its records, and its process slot, carry that command's tenant id while
 * it serves (krex_simcuda.h). */
__attribute__((visibility("default"))) void krex_sim_set_tenant(int32_t tenant_id)
{
    pthread_once(&log_once, load_config);
    __atomic_store_n(&log_tenant, tenant_id, __ATOMIC_RELAXED);
    struct krex_sim_proc_slot *slot = __atomic_load_n(&sim_proc.slot, __ATOMIC_ACQUIRE);
    if (slot)
        __atomic_store_n(&slot->tenant_id, tenant_id, __ATOMIC_RELAXED);
}
