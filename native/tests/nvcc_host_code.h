/*
 * What nvcc's host code declares and emits (crt/host_runtime.h), for the test
 * programs written against the CUDA runtime: the registration entry points,
 * and a fatbinary to register (a __fatBinC_Wrapper_t around a fatbin header
 * and a simulated module: the simulator loads any image).
 */
#ifndef KREX_TESTS_NVCC_HOST_CODE_H
#define KREX_TESTS_NVCC_HOST_CODE_H

#include <cuda_runtime_api.h>
#include <stdint.h>

void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);

/* A fatbinary: its header (magic, version, header size, size of what follows)
 * and the simulator's module. */
static const struct {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size;
    char module[24];
} fatbin = {0xba55ed50u, 1, 16, 24, "simulated module"};

static const struct {
    int magic;
    int version;
    const void *data;
    void *filename_or_fatbins;
} fat_device_text = {0x466243b1, 1, &fatbin, NULL};

#endif /* KREX_TESTS_NVCC_HOST_CODE_H */
