/*
 * Resolves driver entry points every way a program can and prints, for each,
 * which object the returned pointer lies in ("krex" for the interception
 * library, "driver" for libcuda, "other"):
 *
 *   <how> <name> <where>
 *
 * Run with libkrex.so preloaded and the (simulated) driver on LD_LIBRARY_PATH.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef CUresult(CUDAAPI *gpa_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult(CUDAAPI *gpa_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult(CUDAAPI *init_fn)(unsigned);

static const char *where(const void *p)
{
    Dl_info info;
    if (p == NULL)
        return "null";
    if (!dladdr(p, &info) || info.dli_fname == NULL)
        return "unknown";
    if (strstr(info.dli_fname, "libkrex"))
        return "krex";
    if (strstr(info.dli_fname, "libcuda"))
        return "driver";
    return "other";
}

int main(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (cuda == NULL) {
        fprintf(stderr, "resolver_probe: %s\n", dlerror());
        return 2;
    }
    static const char *names[] = {
        "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuMemcpyHtoD_v2",
        "cuMemcpyHtoDAsync_v2_ptsz", "cuGraphLaunch", "cuEventRecord", "cuModuleLoadData",
        "cuGetProcAddress", "cuGetProcAddress_v2", "cuGetExportTable", "cuDeviceGet", "cuCtxSynchronize",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        printf("dlsym %s %s\n", names[i], where(dlsym(cuda, names[i])));
    printf("dlsym-default strlen %s\n", where(dlsym(RTLD_DEFAULT, "strlen")));
    printf("dlsym-default cuLaunchKernel %s\n", where(dlsym(RTLD_DEFAULT, "cuLaunchKernel")));

    init_fn init = (init_fn)dlsym(cuda, "cuInit");
    if (init == NULL || init(0) != CUDA_SUCCESS) {
        fprintf(stderr, "resolver_probe: cuInit failed\n");
        return 2;
    }
    gpa_v2_fn gpa = (gpa_v2_fn)dlsym(cuda, "cuGetProcAddress_v2");
    CUdriverProcAddressQueryResult st;
    void *p = NULL;
    static const char *gpa_names[] = {"cuGetProcAddress", "cuLaunchKernel", "cuMemcpyHtoD", "cuCtxSynchronize",
                                      "cuGetExportTable", "cuStreamSynchronize", "cuDeviceGet"};
    for (size_t i = 0; i < sizeof gpa_names / sizeof gpa_names[0]; i++) {
        p = NULL;
        CUresult r = gpa(gpa_names[i], &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
        printf("getproc %s %s\n", gpa_names[i], r == CUDA_SUCCESS ? where(p) : "error");
    }
    /* per-thread default stream: the _ptsz variant, which must map by identity */
    p = NULL;
    CUresult r = gpa("cuLaunchKernel", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
    Dl_info info;
    const char *sym = p != NULL && dladdr(p, &info) && info.dli_sname ? info.dli_sname : "?";
    printf("getproc-ptsz cuLaunchKernel %s %s\n", r == CUDA_SUCCESS ? where(p) : "error", sym);
    /* the resolver handed out for cuGetProcAddress is itself a wrapper: asking it again swaps too */
    gpa_v2_fn gpa2 = NULL;
    gpa("cuGetProcAddress", (void **)&gpa2, 12000, 0, &st);
    p = NULL;
    r = gpa2 ? gpa2("cuLaunchKernelEx", &p, 12000, 0, &st) : CUDA_ERROR_UNKNOWN;
    printf("getproc-nested cuLaunchKernelEx %s\n", r == CUDA_SUCCESS ? where(p) : "error");
    gpa_v1_fn gpa1 = (gpa_v1_fn)dlsym(cuda, "cuGetProcAddress");
    p = NULL;
    r = gpa1 ? gpa1("cuMemsetD8", &p, 11000, 0) : CUDA_ERROR_UNKNOWN;
    printf("getproc-v1 cuMemsetD8 %s\n", r == CUDA_SUCCESS ? where(p) : "error");
    return 0;
}
