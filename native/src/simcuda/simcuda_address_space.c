/*
 * Device memory's addresses: one range per device (an arena), its mapped part
 * only growing. The allocator (simcuda_api_memory.c) carves allocations out of
 * it; copies, memsets and kernels (simcuda_stream.c) ask whether an address
 * range is mapped before they touch it, as a GPU's MMU would.
 */
#include "simcuda_internal.h"

struct sim_arena sim_arenas[KREX_SIM_MAX_DEVICES];

bool sim_device_range_mapped(uint64_t addr, uint64_t bytes)
{
    for (int i = 0; i < KREX_SIM_MAX_DEVICES; i++) {
        uint64_t mapped = __atomic_load_n(&sim_arenas[i].mapped, __ATOMIC_ACQUIRE);
        uint64_t base = __atomic_load_n(&sim_arenas[i].base, __ATOMIC_ACQUIRE);
        if (mapped == 0 || addr < base)
            continue;
        uint64_t at = addr - base;
        if (at <= mapped && bytes <= mapped - at)
            return true;
    }
    return false;
}
