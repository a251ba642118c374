/* Memsets of every width, synchronous and on a stream, read back. */
#include "corpus_driver.h"

int main(void)
{
    CUcontext ctx;
    corpus_setup(&ctx, "unused");
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 4096));
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuMemsetD8(d, 0xab, 1024));
    CHECK(cuMemsetD16(d + 1024, 0x1234, 512));
    CHECK(cuMemsetD32Async(d + 2048, 0xdeadbeefu, 256, s));
    CHECK(cuMemsetD8Async(d + 3072, 0x5a, 1024, s));
    CHECK(cuStreamSynchronize(s));
    uint8_t back[4096];
    CHECK(cuMemcpyDtoH(back, d, sizeof back));
    for (int i = 0; i < 1024; i++)
        EXPECT(back[i] == 0xab && back[3072 + i] == 0x5a);
    for (int i = 0; i < 512; i++) {
        uint16_t v;
        memcpy(&v, back + 1024 + 2 * i, 2);
        EXPECT(v == 0x1234);
    }
    for (int i = 0; i < 256; i++) {
        uint32_t v;
        memcpy(&v, back + 2048 + 4 * i, 4);
        EXPECT(v == 0xdeadbeefu);
    }
    printf("memset_widths: intact\n");
    return 0;
}
