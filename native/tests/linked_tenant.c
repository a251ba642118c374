/*
 * A tenant linked with -lcuda (here: the simulated driver), so its driver
 * calls reach the interception library by symbol interposition alone.
 *
 *   linked_tenant THREADS ITERATIONS KERNEL_NS [BATCH]
 *
 * Each thread makes its own stream and submits simulated kernels in a loop,
 * synchronising every BATCH launches (so work is in flight when a gate
 * closes). Threads use different launch paths: cuLaunchKernel,
 * cuLaunchKernel_ptsz, cuLaunchKernelEx, and a pointer from cuGetProcAddress.
 * ITERATIONS 0 means: until stdin reaches end of file. Prints "ready" once
 * every thread has launched, and "done <launches>" at the end.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                 \
    do {                                                                            \
        CUresult r_ = (call);                                                       \
        if (r_ != CUDA_SUCCESS) {                                                   \
            fprintf(stderr, "linked_tenant: %s failed: %d\n", #call, (int)r_);      \
            exit(2);                                                                \
        }                                                                           \
    } while (0)

typedef CUresult(CUDAAPI *launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, CUstream, void **, void **);

static CUcontext ctx;
static CUfunction kernel;
static long iterations, batch;
static unsigned long long kernel_ns;
static int stop;
static int started_threads, n_threads;
static unsigned long long launches;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void *submitter(void *arg)
{
    long id = (long)arg;
    CHECK(cuCtxSetCurrent(ctx));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    launch_fn via_procaddr = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK(cuGetProcAddress_v2("cuLaunchKernel", (void **)&via_procaddr, 12000, 0, &st));
    unsigned long long duration = kernel_ns;
    void *params[] = {&duration, NULL};
    CUdeviceptr none = 0;
    params[1] = &none;
    for (long i = 0; iterations == 0 ? !__atomic_load_n(&stop, __ATOMIC_ACQUIRE) : i < iterations; i++) {
        switch (id % 4) {
        case 0:
            CHECK(cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
            break;
        case 1:
            CHECK(cuLaunchKernel_ptsz(kernel, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
            break;
        case 2: {
            CUlaunchConfig cfg;
            memset(&cfg, 0, sizeof cfg);
            cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
            cfg.blockDimX = 32;
            cfg.blockDimY = cfg.blockDimZ = 1;
            cfg.hStream = s;
            CHECK(cuLaunchKernelEx(&cfg, kernel, params, NULL));
            break;
        }
        default:
            CHECK(via_procaddr(kernel, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
            break;
        }
        __atomic_fetch_add(&launches, 1, __ATOMIC_RELAXED);
        if (i == 0) {
            pthread_mutex_lock(&mu);
            if (++started_threads == n_threads) {
                printf("ready\n");
                fflush(stdout);
            }
            pthread_mutex_unlock(&mu);
            pthread_cond_broadcast(&cv);
        }
        if ((i + 1) % batch == 0)
            CHECK(cuStreamSynchronize(s));
    }
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamDestroy_v2(s));
    return NULL;
}

static void *stdin_watch(void *arg)
{
    (void)arg;
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: linked_tenant THREADS ITERATIONS KERNEL_NS [BATCH]\n");
        return 2;
    }
    n_threads = atoi(argv[1]);
    iterations = atol(argv[2]);
    kernel_ns = strtoull(argv[3], NULL, 10);
    batch = argc > 4 ? atol(argv[4]) : 4;
    if (batch < 1)
        batch = 1;
    CHECK(cuInit(0));
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CUmodule mod;
    static const char image[] = "simulated module";
    CHECK(cuModuleLoadData(&mod, image));
    CHECK(cuModuleGetFunction(&kernel, mod, "spin"));
    /* one copy and one memset, so those classes are seen too */
    CUdeviceptr buf;
    CHECK(cuMemAlloc_v2(&buf, 4096));
    char host[4096] = {0};
    CHECK(cuMemcpyHtoD_v2(buf, host, sizeof host));
    CHECK(cuMemsetD8_v2(buf, 0, sizeof host));

    pthread_t watcher, threads[64];
    if (iterations == 0)
        pthread_create(&watcher, NULL, stdin_watch, NULL);
    if (n_threads > 64)
        n_threads = 64;
    for (long i = 0; i < n_threads; i++)
        pthread_create(&threads[i], NULL, submitter, (void *)i);
    for (int i = 0; i < n_threads; i++)
        pthread_join(threads[i], NULL);
    CHECK(cuCtxSynchronize());
    CHECK(cuMemFree_v2(buf));
    printf("done %llu\n", launches);
    fflush(stdout);
    return 0;
}
