/*
 * Driver entry points: initialisation, version, devices, error names.
 */
#include "simcuda_internal.h"

#include <stdio.h>
#include <string.h>

/* What every question about one device checks first: the driver is
 * initialised, the arguments (`bad` says they are not) and the device. */
#define DEVICE_QUERY(bad, dev)                                                                               \
    do {                                                                                                     \
        CHECK_INIT();                                                                                        \
        if (bad)                                                                                             \
            return CUDA_ERROR_INVALID_VALUE;                                                                 \
        if (!sim_valid_ordinal(dev))                                                                         \
            return CUDA_ERROR_INVALID_DEVICE;                                                                \
    } while (0)

static const struct krex_sim_device_info *device_info(CUdevice dev)
{
    return &sim_proc.shm->devices[sim_proc.visible[dev]];
}

/* ---- initialisation and version ------------------------------------------- */

static CUresult init_impl(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    return sim_proc.visible_count > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult CUDAAPI cuInit(unsigned int flags)
{
    SIM_GATED(init_impl(flags));
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* ---- devices ----------------------------------------------------------------- */

static CUresult device_get_count(int *count)
{
    CHECK_INIT();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim_proc.visible_count;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    SIM_GATED(device_get_count(count));
}

static CUresult device_get(CUdevice *device, int ordinal)
{
    DEVICE_QUERY(!device, ordinal);
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    SIM_GATED(device_get(device, ordinal));
}

static CUresult device_get_name(char *name, int len, CUdevice dev)
{
    DEVICE_QUERY(!name || len <= 0, dev);
    snprintf(name, (size_t)len, "%s", device_info(dev)->name);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    SIM_GATED(device_get_name(name, len, dev));
}

static CUresult device_get_uuid(CUuuid *uuid, CUdevice dev)
{
    DEVICE_QUERY(!uuid, dev);
    memcpy(uuid->bytes, device_info(dev)->uuid, sizeof uuid->bytes);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    SIM_GATED(device_get_uuid(uuid, dev));
}

static CUresult device_total_mem(size_t *bytes, CUdevice dev)
{
    DEVICE_QUERY(!bytes, dev);
    *bytes = device_info(dev)->total_mem;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    SIM_GATED(device_total_mem(bytes, dev));
}

static CUresult device_total_mem_v1(unsigned int *bytes, CUdevice dev)
{
    size_t total = 0;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = device_total_mem(&total, dev);
    if (rc == CUDA_SUCCESS)
        *bytes = total > 0xffffffffu ? 0xffffffffu : (unsigned int)total;
    return rc;
}

CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    SIM_GATED(device_total_mem_v1(bytes, dev));
}

/* A few common attributes, shaped like an H100/H200-class part; everything
 * else reads 0. They describe nothing real: the simulator has no SMs. */
static int attribute_value(CUdevice_attribute attrib, CUdevice dev)
{
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return sim_proc.visible[dev] + 1;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 52428800;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 0;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 0;
    default: return 0;
    }
}

static CUresult device_get_attribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    DEVICE_QUERY(!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX, dev);
    *pi = attribute_value(attrib, dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    SIM_GATED(device_get_attribute(pi, attrib, dev));
}

static CUresult device_compute_capability(int *major, int *minor, CUdevice dev)
{
    DEVICE_QUERY(!major || !minor, dev);
    *major = attribute_value(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    *minor = attribute_value(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    SIM_GATED(device_compute_capability(major, minor, dev));
}

static CUresult device_get_pci_bus_id(char *bus_id, int len, CUdevice dev)
{
    DEVICE_QUERY(!bus_id || len <= 0, dev);
    snprintf(bus_id, (size_t)len, "00000000:%02X:00.0", sim_proc.visible[dev] + 1);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    SIM_GATED(device_get_pci_bus_id(pciBusId, len, dev));
}

/* ---- errors: the table is generated from cuda.h at build time ------------------------ */

struct sim_error {
    CUresult code;
    const char *name;
    const char *text;
};

static const struct sim_error sim_errors[] = {
#include "simcuda_errors.inc"
};

static const struct sim_error *find_error(CUresult code)
{
    for (size_t i = 0; i < sizeof sim_errors / sizeof sim_errors[0]; i++)
        if (sim_errors[i].code == code)
            return &sim_errors[i];
    return NULL;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct sim_error *e = find_error(error);
    *pStr = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    const struct sim_error *e = find_error(error);
    *pStr = e ? e->text : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    (void)pExportTableId;
    /* Private tables of the real driver (used by libcudart) do not exist here. */
    if (ppExportTable)
        *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
