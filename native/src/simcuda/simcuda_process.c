/*
 * This process and the others that use the simulator, as the kernel tells
 * them: this process's view of the shared device (sim_proc), and whether a
 * pid still names the process that claimed a slot. Below the device, its
 * heat model and its lock, which all ask it.
 */
#include "simcuda_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sim_process sim_proc;

/* Reads state and start time (field 22) of /proc/<pid>/stat. Returns false if
 * the file cannot be read (the process is gone). */
bool sim_read_proc_stat(int pid, char *state, uint64_t *start_time)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    /* The command name may contain spaces and parentheses: parse after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return false;
    p += 2;
    *state = *p;
    /* state is field 3; start time is field 22, i.e. 19 fields further on. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return false;
        p++;
    }
    *start_time = strtoull(p, NULL, 10);
    return true;
}

static bool pid_alive(int pid, uint64_t start_time)
{
    if (pid <= 0)
        return false;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    char state = '?';
    uint64_t now_start = 0;
    if (!sim_read_proc_stat(pid, &state, &now_start))
        return kill(pid, 0) == 0 || errno != ESRCH; /* no /proc: trust kill() */
    if (state == 'Z' || state == 'X')
        return false; /* exited, not yet waited for: its work is gone */
    if (start_time && now_start && now_start != start_time)
        return false; /* the pid was reused by another process */
    return true;
}

bool sim_pid_alive(int pid)
{
    return pid_alive(pid, 0);
}

bool sim_slot_alive(const struct krex_sim_proc_slot *slot, int pid)
{
    return pid_alive(pid, __atomic_load_n(&slot->start_time, __ATOMIC_ACQUIRE));
}
