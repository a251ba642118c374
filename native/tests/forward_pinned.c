/*
 * Page-locked host memory, in process mode and forwarded alike (on the
 * simulated driver; forwarded, from the command's pinned arena):
 *
 *   forward_pinned data        writes into pinned memory, copies it both ways
 *                              (synchronous, asynchronous, at offsets inside an
 *                              allocation), checks every byte (exit 1 on a
 *                              mismatch); says whether an async copy behind a
 *                              long kernel left the host free, and whether a
 *                              freed range handed out again was zeroed
 *   forward_pinned costs       one copy each of a cuMemAllocHost buffer, a
 *                              cuMemHostRegister'ed one and pageable memory,
 *                              of sizes of their own (the test reads their
 *                              costs from the simulator's log)
 *   forward_pinned region      inside a region: 3 event-timed copies of
 *                              registered memory, 2 of an allocation
 *   forward_pinned hold        pinned memory written, then waits to be killed
 *   forward_pinned bad-offset  (forwarded only) raw requests into its own ring:
 *                              pinned copies at offsets outside what the server
 *                              registered, then a range outside the arena
 *   forward_pinned truncate    (forwarded only) truncates its pinned arena under
 *                              its server, then copies from it
 */
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "corpus/corpus_driver.h"
#include "krex.h"
#include "krex_forward.h"

#define N (1u << 20)
#define PINNED_BYTES (18u * 4096)
#define REGISTERED_BYTES (19u * 4096)
#define PAGEABLE_BYTES (20u * 4096)

static void check_bytes(const uint8_t *got, const uint8_t *want, size_t n, const char *what)
{
    if (memcmp(got, want, n) != 0) {
        fprintf(stderr, "%s: bytes differ\n", what);
        exit(1);
    }
}

static int data(CUfunction k)
{
    uint8_t *host, *back, *want = malloc(N);
    CHECK(cuMemAllocHost((void **)&host, N));
    CHECK(cuMemHostAlloc((void **)&back, N, CU_MEMHOSTALLOC_PORTABLE));
    corpus_fill(host, N, 11);
    memcpy(want, host, N);
    CUdeviceptr d, counter;
    CHECK(cuMemAlloc(&d, N));
    CHECK(cuMemAlloc(&counter, 8));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    /* Synchronous both ways. */
    CHECK(cuMemcpyHtoD(d, host, N));
    memset(back, 0, N);
    CHECK(cuMemcpyDtoH(back, d, N));
    check_bytes(back, want, N, "synchronous");
    /* At offsets inside the allocations. */
    memset(back, 0, N);
    CHECK(cuMemcpyHtoD(d + 100, host + 4096 + 3, 5000));
    CHECK(cuMemcpyDtoH(back + 777, d + 100, 5000));
    check_bytes(back + 777, want + 4096 + 3, 5000, "offsets");
    /* Asynchronous, queued behind a 300 ms kernel: the call returns while the
     * stream still runs it. */
    corpus_fill(host, N, 29);
    memcpy(want, host, N);
    memset(back, 0, N);
    corpus_launch(k, 1, 32, s, 300000000ull, counter);
    CHECK(cuMemcpyHtoDAsync(d, host, N, s));
    CHECK(cuMemcpyDtoHAsync(back, d, N, s));
    CUresult busy = cuStreamQuery(s);
    CHECK(cuStreamSynchronize(s));
    check_bytes(back, want, N, "asynchronous");
    /* A range freed and handed out again starts zeroed. */
    memset(host, 0xab, N);
    CHECK(cuMemFreeHost(host));
    uint8_t *again;
    CHECK(cuMemAllocHost((void **)&again, N));
    size_t nonzero = 0;
    for (size_t i = 0; i < N; i++)
        nonzero += again[i] != 0;
    CHECK(cuMemFreeHost(again));
    CHECK(cuMemFreeHost(back));
    printf("pinned intact: sync, offsets, async (stream busy at return: %s), reused range zeroed: %s\n",
           busy == CUDA_ERROR_NOT_READY ? "yes" : "no", nonzero == 0 ? "yes" : "no");
    return 0;
}

static int costs(void)
{
    uint8_t *pinned, *registered = aligned_alloc(4096, REGISTERED_BYTES), *pageable = malloc(PAGEABLE_BYTES);
    CHECK(cuMemAllocHost((void **)&pinned, PINNED_BYTES));
    CHECK(cuMemHostRegister(registered, REGISTERED_BYTES, 0));
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, PAGEABLE_BYTES));
    CHECK(cuMemcpyHtoD(d, pinned, PINNED_BYTES));
    CHECK(cuMemcpyHtoD(d, registered, REGISTERED_BYTES));
    CHECK(cuMemcpyHtoD(d, pageable, PAGEABLE_BYTES));
    CHECK(cuMemHostUnregister(registered));
    CHECK(cuMemFreeHost(pinned));
    printf("costs: 3 copies\n");
    return 0;
}

static int region(void)
{
    uint8_t *pinned, *registered = aligned_alloc(4096, N);
    CHECK(cuMemAllocHost((void **)&pinned, N));
    CHECK(cuMemHostRegister(registered, N, 0));
    corpus_fill(pinned, N, 1);
    corpus_fill(registered, N, 2);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, N));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUevent a, b;
    CHECK(cuEventCreate(&a, 0));
    CHECK(cuEventCreate(&b, 0));
    EXPECT(krex_region_enter() == 0);
    float ms;
    for (int i = 0; i < 5; i++) {
        CHECK(cuEventRecord(a, s));
        CHECK(cuMemcpyHtoDAsync(d, i < 3 ? registered : pinned, 64u << 10, s));
        CHECK(cuEventRecord(b, s));
        CHECK(cuEventSynchronize(b));
        CHECK(cuEventElapsedTime(&ms, a, b));
    }
    EXPECT(krex_region_exit() == 0);
    printf("region: 5 timed copies\n");
    return 0;
}

static int hold(void)
{
    uint8_t *p;
    CHECK(cuMemAllocHost((void **)&p, 8u << 20));
    corpus_fill(p, 8u << 20, 5);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 8u << 20));
    CHECK(cuMemcpyHtoD(d, p, 8u << 20));
    printf("holding\n");
    fflush(stdout);
    for (;;)
        pause();
}

/* One request written into the ring behind the client's back (it is idle),
 * waited for; the server's result. */
static int raw_call(struct krex_fwd_header *h, uint8_t *ring, unsigned op, CUcontext ctx, const uint64_t *args,
                    unsigned nargs)
{
    uint64_t head = h->req_head, off = head & (h->ring_size - 1);
    if (h->ring_size - off < sizeof(struct krex_fwd_msg))
        return -2; /* not at the ring's end: the test runs early in the command */
    struct krex_fwd_msg *m = (struct krex_fwd_msg *)(ring + off);
    memset(m, 0, sizeof *m);
    m->size = sizeof *m, m->op = (uint16_t)op, m->flags = KREX_FWD_WANT_REPLY;
    m->ctx = (uint64_t)(uintptr_t)ctx, m->nargs = nargs;
    memcpy(m->args, args, nargs * sizeof args[0]);
    uint32_t before = __atomic_load_n(&h->reply_seq, __ATOMIC_ACQUIRE);
    __atomic_store_n(&h->req_head, head + sizeof *m, __ATOMIC_RELEASE);
    __atomic_fetch_add(&h->req_seq, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &h->req_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
    for (int i = 0; i < 1000 && __atomic_load_n(&h->reply_seq, __ATOMIC_ACQUIRE) == before; i++)
        usleep(10000);
    if (__atomic_load_n(&h->server_state, __ATOMIC_ACQUIRE) == KREX_FWD_STATE_FAILED)
        return -1;
    return h->reply_result;
}

static int bad_offset(CUcontext ctx)
{
    const char *path = getenv(KREX_FWD_ENV_RING);
    struct stat st;
    int fd = path != NULL ? open(path, O_RDWR) : -1;
    if (fd < 0 || fstat(fd, &st) != 0)
        return 2;
    uint8_t *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return 2;
    struct krex_fwd_header *h = (struct krex_fwd_header *)p;
    uint8_t *ring = p + KREX_FWD_HEADER_SIZE;
    uint8_t *host;
    CHECK(cuMemAllocHost((void **)&host, 8192)); /* the arena's first two pages, registered */
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 8192));
    CHECK(cuCtxGetCurrent(&ctx));
    uint64_t beyond[] = {d, 8192, 4096, 0, 0};          /* past the registered range */
    uint64_t wrapping[] = {d, ~0ull - 100, 4096, 0, 0};  /* an offset that wraps */
    uint64_t not_owned[] = {d + (1u << 30), 0, 4096, 0, 0}; /* device memory not the command's */
    uint64_t inside[] = {d, 4096, 4096, 0, 0};          /* the one that is right */
    printf("beyond %d\n", raw_call(h, ring, KREX_FWD_OP_HTOD_PINNED, ctx, beyond, 5));
    printf("wrapping %d\n", raw_call(h, ring, KREX_FWD_OP_DTOH_PINNED, ctx, wrapping, 5));
    printf("not owned %d\n", raw_call(h, ring, KREX_FWD_OP_DTOH_PINNED, ctx, not_owned, 5));
    printf("inside %d\n", raw_call(h, ring, KREX_FWD_OP_HTOD_PINNED, ctx, inside, 5));
    uint64_t outside[] = {1ull << 40, 4096};
    printf("register outside %d\n", raw_call(h, ring, KREX_FWD_OP_PINNED_REGISTER, ctx, outside, 2));
    printf("server: %.200s\n", h->reason);
    return 0;
}

static int truncate_arena(void)
{
    uint8_t *p;
    CHECK(cuMemAllocHost((void **)&p, N));
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, N));
    const char *path = getenv(KREX_FWD_ENV_PINNED);
    int fd = path != NULL ? open(path, O_RDWR) : -1;
    if (fd < 0 || ftruncate(fd, 0) != 0)
        return 2;
    CUresult copy = cuMemcpyHtoD(d, p, N);
    CUresult next = cuCtxSynchronize();
    printf("copy %d, next %d\n", (int)copy, (int)next);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    CUcontext ctx;
    CUfunction k = corpus_setup(&ctx, "pinned_kernel");
    if (strcmp(argv[1], "data") == 0)
        return data(k);
    if (strcmp(argv[1], "costs") == 0)
        return costs();
    if (strcmp(argv[1], "region") == 0)
        return region();
    if (strcmp(argv[1], "hold") == 0)
        return hold();
    if (strcmp(argv[1], "bad-offset") == 0)
        return bad_offset(ctx);
    if (strcmp(argv[1], "truncate") == 0)
        return truncate_arena();
    return 2;
}
