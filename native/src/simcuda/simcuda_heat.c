/*
 * What a simulated device's sensors tell (krex_simcuda.h, "Heat and the SM
 * clock"): how long it has been busy, its temperature, and the SM clock its
 * kernels run at. A GPU's figures come from its own hardware; here they come
 * from the work the processes sharing the device run on it, so a busy device
 * reads busy and, with the heat model on, a device kept busy heats and runs
 * its kernels at a lower clock, which the runtime's telemetry then reads as a
 * GPU's (krex_runtime/telemetry/gpu_metrics.py). Nothing here is a GPU figure.
 *
 * The model is stepped by the processes that run work, from their stream
 * workers' quanta (sim_device_run): an idle device takes no step, and the
 * first step after an idle spell integrates it (a busy share near 0 cools it).
 */
#include "simcuda_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A stepper found holding the lock this long after the last step is looked at:
 * if it died mid-step, its lock is taken over. */
#define SIM_HEAT_STALE_NS 1000000000ull

static struct krex_sim_device_load *load_of(int phys)
{
    return &sim_proc.shm->load[phys];
}

void sim_heat_busy(int phys, uint64_t ns)
{
    __atomic_add_fetch(&load_of(phys)->busy_ns, ns, __ATOMIC_RELAXED);
}

static double temperature_after(double temp_c, uint64_t dt_ns, uint64_t busy_ns)
{
    if (dt_ns == 0)
        return temp_c;
    double u = (double)busy_ns / (double)dt_ns;
    u = u < 0.0 ? 0.0 : u > 1.0 ? 1.0 : u;
    double target = KREX_SIM_AMBIENT_C + KREX_SIM_LOAD_RISE_C * u;
    return target + (temp_c - target) * exp(-(double)dt_ns / (KREX_SIM_HEAT_TAU_MS * 1e6));
}

static uint32_t clock_at(double temp_c)
{
    if (!__atomic_load_n(&sim_proc.shm->heat, __ATOMIC_RELAXED) || temp_c <= KREX_SIM_BOOST_KNEE_C)
        return KREX_SIM_TOP_SM_CLOCK_MHZ;
    uint32_t bins = (uint32_t)((temp_c - KREX_SIM_BOOST_KNEE_C) / KREX_SIM_BOOST_BIN_C);
    uint32_t most = (KREX_SIM_TOP_SM_CLOCK_MHZ - KREX_SIM_BASE_SM_CLOCK_MHZ) / KREX_SIM_BOOST_BIN_MHZ;
    return KREX_SIM_TOP_SM_CLOCK_MHZ - (bins < most ? bins : most) * KREX_SIM_BOOST_BIN_MHZ;
}

uint32_t sim_heat_clock(int phys)
{
    uint32_t mhz = __atomic_load_n(&load_of(phys)->sm_clock_mhz, __ATOMIC_RELAXED);
    return mhz ? mhz : KREX_SIM_TOP_SM_CLOCK_MHZ;
}

static bool take_step_lock(struct krex_sim_device_load *load, uint64_t now)
{
    int32_t free_word = 0;
    if (__atomic_compare_exchange_n(&load->step_lock, &free_word, sim_proc.pid, false, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED))
        return true;
    /* Held: by a process stepping now (the usual case: skip this step), or by
     * one that died mid-step, which only a stale step shows. */
    uint64_t last = __atomic_load_n(&load->heat_ns, __ATOMIC_RELAXED);
    if (now - last < SIM_HEAT_STALE_NS || free_word == sim_proc.pid || sim_pid_alive(free_word))
        return false;
    return __atomic_compare_exchange_n(&load->step_lock, &free_word, sim_proc.pid, false, __ATOMIC_ACQUIRE,
                                       __ATOMIC_RELAXED);
}

void sim_heat_step(int phys, uint64_t now)
{
    struct krex_sim_device_load *load = load_of(phys);
    uint64_t last = __atomic_load_n(&load->heat_ns, __ATOMIC_RELAXED);
    if (last && now - last < KREX_SIM_HEAT_STEP_NS)
        return;
    if (!take_step_lock(load, now))
        return;
    last = __atomic_load_n(&load->heat_ns, __ATOMIC_ACQUIRE);
    if (!last || now - last >= KREX_SIM_HEAT_STEP_NS) {
        uint64_t busy = __atomic_load_n(&load->busy_ns, __ATOMIC_RELAXED);
        double temp = KREX_SIM_AMBIENT_C;
        if (last && now > last)
            temp = temperature_after(load->temp_mc / 1000.0, now - last, busy - load->heat_busy_ns);
        uint32_t seq = __atomic_add_fetch(&load->seq_end, 1, __ATOMIC_RELEASE);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        load->heat_busy_ns = busy;
        load->temp_mc = (int32_t)lround(temp * 1000.0);
        __atomic_store_n(&load->sm_clock_mhz, clock_at(temp), __ATOMIC_RELAXED);
        __atomic_store_n(&load->heat_ns, now, __ATOMIC_RELEASE);
        __atomic_store_n(&load->seq_start, seq, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&load->step_lock, 0, __ATOMIC_RELEASE);
}

void sim_heat_enable_from_env(struct krex_sim_shm *shm)
{
    const char *s = getenv(KREX_SIM_ENV_HEAT);
    if (s && strcmp(s, "1") == 0)
        __atomic_store_n(&shm->heat, 1, __ATOMIC_RELEASE);
}
