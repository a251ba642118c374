/*
 * The forwarding client: a libcuda.so.1 whose entry points send each call to
 * the command's context server (krex_forward.h). Files:
 *   client.c           the channel: attach, send, wait for a reply, failures
 *   client_ops_gen.c   the forwarded entry points of one shape, generated
 *                      from tools/forward_ops.py (tools/gen_forward_ops.py)
 *   client_api.c       the forwarded entry points that carry bytes or
 *                      need more than packing their arguments
 *   client_local.c     what never leaves the process: current contexts,
 *                      error strings
 *   client_pinned.c    page-locked host memory: ranges of the pinned arena,
 *                      and what stays ordinary memory (staged copies)
 *   client_procaddr.c  cuGetProcAddress over this library's own entry points
 *   (generated)        _v2/_ptsz aliases and a stub for every other entry
 *                      point of cuda.h, which reports the call as not forwarded
 */
#ifndef KREX_FWD_CLIENT_H
#define KREX_FWD_CLIENT_H

#define __CUDA_API_VERSION_INTERNAL 1
#define __CUDA_API_PUSH_VISIBILITY_DEFAULT 1
#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>

#include "fwd_common.h"

struct fwd_reply {
    uint64_t out[KREX_FWD_MAX_OUT];
    void *data;      /* where staged reply bytes go (NULL: dropped) */
    size_t data_cap;
    size_t data_len; /* bytes the server staged */
};

/* Sends one request. With a reply (reply != NULL) it waits for it and returns
 * the server's result; without, it returns CUDA_SUCCESS once the request is
 * in the ring. Two blobs are sent one after the other (either may be empty). */
CUresult fwd_call(unsigned op, unsigned flags, const uint64_t *args, unsigned nargs, const void *blob,
                  size_t blob_len, const void *blob2, size_t blob2_len, struct fwd_reply *reply);
/* The largest blob one request may carry (copies from the host are chunked). */
size_t fwd_max_blob(void);
/* The staging area's size: the most one reply can carry. */
size_t fwd_staging_size(void);
/* An entry point this library does not forward: says which, remembers it for
 * the runtime and, under KREX_FORWARD_FALLBACK=process, ends the command. */
CUresult fwd_unknown(const char *name);
/* A copy from or to page-locked host memory went through the ring and the
 * staging area: counted in the segment for the runtime, which says so in the
 * command's result (it is not the one DMA the program asked for), and for
 * the region the process holds (krex_forward_staged_copies). */
void fwd_count_staged_pinned(void);
/* client_pinned.c: is [p, p+n) inside page-locked host memory of the process
 * that is ordinary memory here (cuMemHostRegister, an allocation the arena
 * had no room for): its copies are staged. */
bool fwd_page_locked(const void *p, size_t n);
/* Is [p, p+n) inside one range of the pinned arena the server registered;
 * *off is then its offset in the arena. */
bool fwd_pinned_offset(const void *p, size_t n, uint64_t *off);
/* Staged copies of page-locked memory so far in this process, found by name
 * by the interception library, which notes those made inside a region in
 * the region's integrity record (staged=N in its EXIT). */
unsigned long long krex_forward_staged_copies(void) __attribute__((visibility("default")));
/* fwd_unknown, exported for forwarded mode's CUDA runtime (src/cudart), which
 * calls it for the runtime entry points it does not implement. */
CUresult krex_forward_unknown_call(const char *name) __attribute__((visibility("default")));
/* Was cuInit called (successfully) in this process. */
bool fwd_initialised(void);
void fwd_set_initialised(void);

/* client_context.c: the calling thread's current context (a server handle),
 * and its stack (false: full, or nothing to pop). */
CUcontext fwd_ctx_current(void);
void fwd_ctx_set(CUcontext ctx);
bool fwd_ctx_push(CUcontext ctx);
bool fwd_ctx_pop(CUcontext *out);
/* cuCtxCreate makes its context current; cuCtxDestroy takes it off every level. */
void fwd_ctx_pushed(CUcontext ctx);
void fwd_ctx_destroyed(CUcontext ctx);
/* Forgets every function's parameter layout (a module was unloaded). */
void fwd_forget_layouts(void);

void fwd_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define FWD_EXPORT __attribute__((visibility("default")))

/* A request's argument slots, as a pointer and a count. */
#define U(x) ((uint64_t)(uintptr_t)(x))
#define ARGS(...) (const uint64_t[]){__VA_ARGS__}, (unsigned)(sizeof((const uint64_t[]){__VA_ARGS__}) / sizeof(uint64_t))
/* The driver's answer to every call but cuInit and cuDriverGetVersion before cuInit. */
#define NEED_INIT()                                                                                         \
    do {                                                                                                    \
        if (!fwd_initialised())                                                                             \
            return CUDA_ERROR_NOT_INITIALIZED;                                                              \
    } while (0)

#endif /* KREX_FWD_CLIENT_H */
