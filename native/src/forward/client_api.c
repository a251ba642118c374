/*
 * The forwarded entry points that are not of one shape (the others are
 * generated from tools/forward_ops.py into client_ops_gen.c): each packs its
 * arguments into a request (krex_forward.h) and, where the program needs an
 * answer, waits for it. What makes these special:
 *
 * - Copies between host and device carry bytes, unless the host side lies in
 *   the pinned arena (client_pinned.c: then only its offset travels). Those
 *   from the host travel in the requests (an asynchronous one is sent
 *   without waiting: the bytes are copied into the ring when the call is
 *   made, as the driver stages pageable memory), those to the host come back
 *   through the staging area.
 *   Copies larger than what one request or reply carries go in chunks.
 * - A device's name and UUID come back as bytes in the staging area.
 * - Modules carry an image (read here from a file, or measured in memory)
 *   and names; unloading one forgets the parameter layouts asked for.
 * - The occupancy calculator's callback is the program's code: it is
 *   evaluated here into a table the server picks from.
 * - Launches carry their kernel parameters. kernelParams is an array of
 *   pointers whose sizes only the function knows. The client asks the server
 *   once per function (cuFuncGetParamInfo there) and sends the bytes; a
 *   driver without cuFuncGetParamInfo (before CUDA 12.4) cannot launch with
 *   kernelParams here (the `extra` packed-buffer form needs no sizes and
 *   always works).
 */
#include "client.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static CUresult ask(unsigned op, const uint64_t *a, unsigned n, struct fwd_reply *r)
{
    return fwd_call(op, 0, a, n, NULL, 0, NULL, 0, r);
}

static CUresult ask_flags(unsigned op, unsigned flags, const uint64_t *a, unsigned n, struct fwd_reply *r)
{
    return fwd_call(op, flags, a, n, NULL, 0, NULL, 0, r);
}

/* ---- devices ----------------------------------------------------------------------- */

FWD_EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    NEED_INIT();
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t cap = (size_t)len < fwd_staging_size() ? (size_t)len : fwd_staging_size();
    struct fwd_reply r = {.data = name, .data_cap = cap};
    CUresult rc = ask(KREX_FWD_OP_DEVICE_NAME, ARGS((uint64_t)cap, (uint64_t)dev), &r);
    if (rc == CUDA_SUCCESS)
        name[cap - 1] = '\0';
    return rc;
}

FWD_EXPORT CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    NEED_INIT();
    if (uuid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct fwd_reply r = {.data = uuid, .data_cap = sizeof *uuid};
    return ask(KREX_FWD_OP_DEVICE_UUID, ARGS((uint64_t)dev), &r);
}

/* ---- memory -------------------------------------------------------------------------- */

/* A copy whose host side is a registered range of the pinned arena: one
 * request with its offset, and the server copies from or to its own mapping
 * of the same pages. The synchronous form waits for the copy; the
 * asynchronous one returns at once, ordered on its stream like the driver's
 * (the program synchronises before it reads what a copy to the host wrote). */
static CUresult pinned_copy(unsigned op, CUdeviceptr dev, uint64_t off, size_t n, CUstream stream, bool async,
                            unsigned flags)
{
    struct fwd_reply r = {0};
    return fwd_call(op, flags, ARGS((uint64_t)dev, off, (uint64_t)n, U(stream), async ? 1u : 0u), NULL, 0, NULL, 0,
                    async ? NULL : &r);
}

/* Host to device: the bytes travel in the requests. A synchronous copy
 * waits for its last chunk (earlier chunks' errors come back with it). */
static CUresult htod(CUdeviceptr dst, const void *src, size_t n, CUstream stream, bool async, unsigned flags)
{
    NEED_INIT();
    if (src == NULL && n > 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t off;
    if (n > 0 && fwd_pinned_offset(src, n, &off))
        return pinned_copy(KREX_FWD_OP_HTOD_PINNED, dst, off, n, stream, async, flags);
    size_t chunk = fwd_max_blob();
    unsigned op = async ? KREX_FWD_OP_HTOD_ASYNC : KREX_FWD_OP_HTOD;
    if (fwd_page_locked(src, n))
        fwd_count_staged_pinned();
    size_t done = 0;
    do {
        size_t part = n - done < chunk ? n - done : chunk;
        bool last = done + part == n;
        struct fwd_reply r = {0};
        CUresult rc = fwd_call(op, flags, ARGS((uint64_t)(dst + done), (uint64_t)part, U(stream)),
                               (const uint8_t *)src + done, part, NULL, 0, last && !async ? &r : NULL);
        if (rc != CUDA_SUCCESS)
            return rc;
        done += part;
    } while (done < n);
    return CUDA_SUCCESS;
}

/* Device to host: each chunk is one reply through the staging area. The
 * asynchronous form waits for its stream (the bytes must be in the program's
 * memory once the stream has reached the copy; here they are at return). */
static CUresult dtoh(void *dst, CUdeviceptr src, size_t n, CUstream stream, bool async, unsigned flags)
{
    NEED_INIT();
    if (dst == NULL && n > 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t off;
    if (n > 0 && fwd_pinned_offset(dst, n, &off))
        return pinned_copy(KREX_FWD_OP_DTOH_PINNED, src, off, n, stream, async, flags);
    if (fwd_page_locked(dst, n))
        fwd_count_staged_pinned();
    size_t chunk = fwd_staging_size();
    unsigned op = async ? KREX_FWD_OP_DTOH_ASYNC : KREX_FWD_OP_DTOH;
    size_t done = 0;
    do {
        size_t part = n - done < chunk ? n - done : chunk;
        struct fwd_reply r = {.data = (uint8_t *)dst + done, .data_cap = part};
        CUresult rc = ask_flags(op, flags, ARGS((uint64_t)(src + done), (uint64_t)part, U(stream)), &r);
        if (rc != CUDA_SUCCESS)
            return rc;
        done += part;
    } while (done < n);
    return CUDA_SUCCESS;
}

#define PT KREX_FWD_PER_THREAD
FWD_EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { return htod(d, s, n, NULL, false, 0); }
FWD_EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) { return htod(d, s, n, NULL, false, PT); }
FWD_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { return htod(d, s, n, st, true, 0); }
FWD_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st) { return htod(d, s, n, st, true, PT); }
FWD_EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { return dtoh(d, s, n, NULL, false, 0); }
FWD_EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n) { return dtoh(d, s, n, NULL, false, PT); }
FWD_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { return dtoh(d, s, n, st, true, 0); }
FWD_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream st) { return dtoh(d, s, n, st, true, PT); }
/* Unified addressing: both sides are taken as device memory (a host pointer
 * of the command means nothing to the server). */

/* ---- modules ------------------------------------------------------------------------- */

/* How many bytes an image given without its size spans: an ELF cubin (to
 * the end of its last section or header table), a fatbin (its header says),
 * a fatbin wrapper (the fatbin it points to), else text (PTX, a simulated
 * module) up to its NUL. 0 when it cannot be told. */
static size_t image_size(const void *image)
{
    const uint8_t *p = image;
    if (memcmp(p, "\x7f" "ELF", 4) == 0 && p[4] == 2) { /* ELF64 */
        uint64_t shoff, phoff, end;
        uint16_t shentsize, shnum, phentsize, phnum;
        memcpy(&phoff, p + 0x20, 8);
        memcpy(&shoff, p + 0x28, 8);
        memcpy(&phentsize, p + 0x36, 2);
        memcpy(&phnum, p + 0x38, 2);
        memcpy(&shentsize, p + 0x3a, 2);
        memcpy(&shnum, p + 0x3c, 2);
        end = shoff + (uint64_t)shentsize * shnum;
        if (phoff + (uint64_t)phentsize * phnum > end)
            end = phoff + (uint64_t)phentsize * phnum;
        for (uint16_t i = 0; i < shnum; i++) {
            const uint8_t *sh = p + shoff + (uint64_t)i * shentsize;
            uint32_t type;
            uint64_t off, size;
            memcpy(&type, sh + 4, 4);
            memcpy(&off, sh + 0x18, 8);
            memcpy(&size, sh + 0x20, 8);
            if (type != 8 /* SHT_NOBITS */ && off + size > end)
                end = off + size;
        }
        return (size_t)end;
    }
    uint32_t magic;
    memcpy(&magic, p, 4);
    if (magic == 0xba55ed50u) { /* fatbin header: magic, version, header size, fat size */
        uint16_t header;
        uint64_t fat;
        memcpy(&header, p + 6, 2);
        memcpy(&fat, p + 8, 8);
        return (size_t)(header + fat);
    }
    return strlen((const char *)p) + 1;
}

static CUresult module_load_bytes(CUmodule *module, const void *bytes, size_t n)
{
    NEED_INIT();
    if (module == NULL || bytes == NULL || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (n > fwd_max_blob()) {
        fwd_log("a module of %zu bytes is larger than a request may carry (%zu bytes)", n, fwd_max_blob());
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct fwd_reply r = {0};
    CUresult rc = fwd_call(KREX_FWD_OP_MODULE_LOAD, 0, NULL, 0, bytes, n, NULL, 0, &r);
    if (rc == CUDA_SUCCESS)
        *module = (CUmodule)(uintptr_t)r.out[0];
    return rc;
}

static const void *unwrap_fatbin(const void *image)
{
    uint32_t magic;
    memcpy(&magic, image, 4);
    if (magic == 0x466243b1u) { /* __fatBinC_Wrapper_t: magic, version, data */
        const void *data;
        memcpy(&data, (const uint8_t *)image + 8, sizeof data);
        return data;
    }
    return image;
}

FWD_EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    if (image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    image = unwrap_fatbin(image);
    return module_load_bytes(module, image, image_size(image));
}

/* JIT options carry pointers into the command (log buffers): they are not
 * forwarded; the image is loaded with the server's defaults. */
FWD_EXPORT CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                               CUjit_option *options, void **optionValues)
{
    (void)numOptions;
    (void)options;
    (void)optionValues;
    return cuModuleLoadData(module, image);
}

FWD_EXPORT CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return cuModuleLoadData(module, fatCubin);
}

/* The file is read here, with the command's rights and working directory. */
FWD_EXPORT CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname)
{
    NEED_INIT();
    if (fname == NULL || module == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = open(fname, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    struct stat st;
    CUresult rc = CUDA_ERROR_FILE_NOT_FOUND;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        size_t n = (size_t)st.st_size;
        uint8_t *buf = malloc(n + 1);
        size_t got = 0;
        while (buf != NULL && got < n) {
            ssize_t k = read(fd, buf + got, n - got);
            if (k <= 0)
                break;
            got += (size_t)k;
        }
        if (buf != NULL && got == n) {
            buf[n] = '\0'; /* text (PTX) is sent with its NUL */
            rc = module_load_bytes(module, buf, n + 1);
        }
        free(buf);
    }
    close(fd);
    return rc;
}

FWD_EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    NEED_INIT();
    struct fwd_reply r = {0};
    CUresult rc = ask(KREX_FWD_OP_MODULE_UNLOAD, ARGS(U(hmod)), &r);
    fwd_forget_layouts();
    return rc;
}

FWD_EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    NEED_INIT();
    if (hfunc == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct fwd_reply r = {0};
    CUresult rc = fwd_call(KREX_FWD_OP_MODULE_FUNCTION, 0, ARGS(U(hmod)), name, strlen(name) + 1, NULL, 0, &r);
    if (rc == CUDA_SUCCESS)
        *hfunc = (CUfunction)(uintptr_t)r.out[0];
    return rc;
}

FWD_EXPORT CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
    NEED_INIT();
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct fwd_reply r = {0};
    CUresult rc = fwd_call(KREX_FWD_OP_MODULE_GLOBAL, 0, ARGS(U(hmod)), name, strlen(name) + 1, NULL, 0, &r);
    if (rc == CUDA_SUCCESS) {
        if (dptr != NULL)
            *dptr = (CUdeviceptr)r.out[0];
        if (bytes != NULL)
            *bytes = (size_t)r.out[1];
    }
    return rc;
}

/* ---- occupancy ----------------------------------------------------------------------- */

/* The callback that gives the dynamic shared memory of a block size is the
 * program's code: it is called here for every candidate (each multiple of
 * the warp up to the largest block), and the server picks from the table, as
 * the driver's calculator would from the callback. */
#define OCC_CANDIDATES 32 /* 32, 64, ... 1024 threads */

FWD_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize,
                                                                      CUfunction func,
                                                                      CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                                      size_t dynamicSMemSize, int blockSizeLimit,
                                                                      unsigned int flags)
{
    NEED_INIT();
    if (minGridSize == NULL || blockSize == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t table[OCC_CANDIDATES];
    size_t table_len = 0;
    if (blockSizeToDynamicSMemSize != NULL) {
        for (int i = 0; i < OCC_CANDIDATES; i++)
            table[i] = (uint64_t)blockSizeToDynamicSMemSize(32 * (i + 1));
        table_len = sizeof table;
    }
    struct fwd_reply r = {0};
    CUresult rc = fwd_call(KREX_FWD_OP_OCC_BLOCK_SIZE, 0,
                           ARGS(U(func), (uint64_t)dynamicSMemSize, (uint64_t)(int64_t)blockSizeLimit,
                                (uint64_t)flags),
                           table, table_len, NULL, 0, &r);
    if (rc == CUDA_SUCCESS)
        *minGridSize = (int)r.out[0], *blockSize = (int)r.out[1];
    return rc;
}

FWD_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                             CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                             size_t dynamicSMemSize, int blockSizeLimit)
{
    return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                                     dynamicSMemSize, blockSizeLimit, 0);
}

/* Parameter layouts, per function handle, asked once. */
#define MAX_PARAMS 256
#define LAYOUT_SLOTS 512u
struct layout {
    CUfunction f;
    uint32_t count;
    uint32_t status; /* CUresult of the question */
    uint32_t *offset_size; /* count pairs */
};
static struct layout layouts[LAYOUT_SLOTS];
static pthread_mutex_t layout_lock = PTHREAD_MUTEX_INITIALIZER;

void fwd_forget_layouts(void)
{
    pthread_mutex_lock(&layout_lock);
    for (unsigned i = 0; i < LAYOUT_SLOTS; i++) {
        free(layouts[i].offset_size);
        memset(&layouts[i], 0, sizeof layouts[i]);
    }
    pthread_mutex_unlock(&layout_lock);
}

/* The layout of f (a copy in *out, caller frees out->offset_size). */
static CUresult layout_of(CUfunction f, struct layout *out)
{
    uintptr_t x = (uintptr_t)f;
    unsigned slot = (unsigned)((x >> 4) ^ (x >> 13)) & (LAYOUT_SLOTS - 1);
    pthread_mutex_lock(&layout_lock);
    struct layout *l = &layouts[slot];
    if (l->f != f) {
        uint32_t buf[2 * MAX_PARAMS];
        struct fwd_reply r = {.data = buf, .data_cap = sizeof buf};
        CUresult rc = ask(KREX_FWD_OP_FUNC_PARAMS, ARGS(U(f)), &r);
        free(l->offset_size);
        memset(l, 0, sizeof *l);
        l->f = f;
        l->status = (uint32_t)rc;
        if (rc == CUDA_SUCCESS) {
            l->count = (uint32_t)r.out[0];
            if (l->count > MAX_PARAMS)
                l->count = MAX_PARAMS;
            l->offset_size = malloc(2 * sizeof(uint32_t) * (l->count ? l->count : 1));
            if (l->offset_size == NULL) {
                l->f = NULL;
                pthread_mutex_unlock(&layout_lock);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            memcpy(l->offset_size, buf, 2 * sizeof(uint32_t) * l->count);
        }
    }
    *out = *l;
    out->offset_size = NULL;
    if (l->status == CUDA_SUCCESS) {
        out->offset_size = malloc(2 * sizeof(uint32_t) * (l->count ? l->count : 1));
        if (out->offset_size == NULL) {
            pthread_mutex_unlock(&layout_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(out->offset_size, l->offset_size, 2 * sizeof(uint32_t) * l->count);
    }
    pthread_mutex_unlock(&layout_lock);
    return (CUresult)out->status;
}

FWD_EXPORT CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                               size_t *paramSize)
{
    NEED_INIT();
    struct layout l;
    CUresult rc = layout_of(func, &l);
    if (rc == CUDA_SUCCESS && paramIndex >= l.count)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        if (paramOffset != NULL)
            *paramOffset = l.offset_size[2 * paramIndex];
        if (paramSize != NULL)
            *paramSize = l.offset_size[2 * paramIndex + 1];
    }
    free(l.offset_size);
    return rc;
}

/* ---- launches ------------------------------------------------------------------------- */

/* The parameter blob: u32 count, u32 mode (0: none, 1: kernelParams, 2:
 * extra buffer), then for kernelParams per parameter u32 size (with bit 31:
 * the pointer was NULL) and the bytes padded to 8; for `extra` the buffer. */
static CUresult pack_params(CUfunction f, void **params, void **extra, uint8_t **blob, size_t *len)
{
    *blob = NULL;
    *len = 0;
    if (params != NULL && extra != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (extra != NULL) {
        const void *buf = NULL;
        size_t size = 0;
        for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != NULL)
                memcpy(&size, extra[i + 1], sizeof size);
            else
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (buf == NULL && size > 0)
            return CUDA_ERROR_INVALID_VALUE;
        *blob = malloc(8 + size);
        if (*blob == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        uint32_t head[2] = {(uint32_t)size, 2};
        memcpy(*blob, head, 8);
        if (size)
            memcpy(*blob + 8, buf, size);
        *len = 8 + size;
        return CUDA_SUCCESS;
    }
    if (params == NULL) {
        *blob = calloc(1, 8);
        *len = 8;
        return *blob ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct layout l;
    CUresult rc = layout_of(f, &l);
    if (rc != CUDA_SUCCESS) {
        free(l.offset_size);
        fwd_log("cannot send the kernel parameters of function %p: the server's driver cannot say their sizes "
                "(cuFuncGetParamInfo: error %d); launch with the `extra` buffer form instead",
                (void *)f, (int)rc);
        return rc == CUDA_ERROR_NOT_FOUND || rc == CUDA_ERROR_NOT_SUPPORTED ? CUDA_ERROR_NOT_SUPPORTED : rc;
    }
    size_t total = 8;
    for (uint32_t i = 0; i < l.count; i++)
        total += 8 + fwd_round8(l.offset_size[2 * i + 1]);
    uint8_t *b = malloc(total);
    if (b == NULL) {
        free(l.offset_size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint32_t head[2] = {l.count, 1};
    memcpy(b, head, 8);
    size_t at = 8;
    for (uint32_t i = 0; i < l.count; i++) {
        uint32_t size = l.offset_size[2 * i + 1];
        uint32_t word[2] = {params[i] == NULL ? size | 0x80000000u : size, 0};
        memcpy(b + at, word, 8);
        at += 8;
        memset(b + at, 0, fwd_round8(size));
        if (params[i] != NULL)
            memcpy(b + at, params[i], size);
        at += fwd_round8(size);
    }
    free(l.offset_size);
    *blob = b;
    *len = total;
    return CUDA_SUCCESS;
}

/* Launch attributes are plain values (ids, numbers, device pointers, server
 * events): they travel as they are, after the parameters. */
static CUresult launch(CUfunction f, const unsigned dims[6], unsigned shmem, CUstream stream, void **params,
                       void **extra, const CUlaunchAttribute *attrs, unsigned nattrs, unsigned flags)
{
    NEED_INIT();
    if (nattrs > 64 || (nattrs > 0 && attrs == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t *blob;
    size_t len;
    CUresult rc = pack_params(f, params, extra, &blob, &len);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (len + nattrs * sizeof *attrs > fwd_max_blob()) {
        free(blob);
        return CUDA_ERROR_INVALID_VALUE;
    }
    rc = fwd_call(KREX_FWD_OP_LAUNCH, flags,
                  ARGS(U(f), dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], shmem, U(stream), nattrs,
                       (uint64_t)len),
                  blob, len, attrs, nattrs * sizeof *attrs, NULL);
    free(blob);
    return rc;
}

FWD_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                           unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                           CUstream hStream, void **kernelParams, void **extra)
{
    const unsigned dims[6] = {gx, gy, gz, bx, by, bz};
    return launch(f, dims, shmem, hStream, kernelParams, extra, NULL, 0, 0);
}

FWD_EXPORT CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                unsigned int bx, unsigned int by, unsigned int bz,
                                                unsigned int shmem, CUstream hStream, void **kernelParams,
                                                void **extra)
{
    const unsigned dims[6] = {gx, gy, gz, bx, by, bz};
    return launch(f, dims, shmem, hStream, kernelParams, extra, NULL, 0, PT);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra, unsigned flags)
{
    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned dims[6] = {c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ};
    return launch(f, dims, c->sharedMemBytes, c->hStream, params, extra, c->attrs, c->numAttrs, flags);
}

FWD_EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                             void **extra)
{
    return launch_ex(config, f, kernelParams, extra, 0);
}

FWD_EXPORT CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                                  void **extra)
{
    return launch_ex(config, f, kernelParams, extra, PT);
}
