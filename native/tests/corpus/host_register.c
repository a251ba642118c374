/* cudaHostRegister's driver call: memory of the program's own, registered,
 * copied asynchronously both ways, then unregistered. */
#include "corpus_driver.h"

#define N (256u << 10)

int main(void)
{
    CUcontext ctx;
    corpus_setup(&ctx, "unused");
    uint8_t *host = aligned_alloc(4096, N), *back = aligned_alloc(4096, N);
    corpus_fill(host, N, 3);
    memset(back, 0, N);
    CHECK(cuMemHostRegister(host, N, CU_MEMHOSTREGISTER_PORTABLE));
    CHECK(cuMemHostRegister(back, N, 0));
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, N));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemcpyHtoDAsync(d, host, N, s));
    CHECK(cuMemcpyDtoHAsync(back, d, N, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(memcmp(host, back, N) == 0);
    CHECK(cuMemHostUnregister(host));
    CHECK(cuMemHostUnregister(back));
    printf("host_register: intact\n");
    return 0;
}
