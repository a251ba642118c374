// A CUDA C++ program built with nvcc (static cudart, the default): launches a
// known kernel N times and checks the result. With "wait" it prints "ready"
// and waits for a line on stdin before launching, so a test can close the
// gate first.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void count_one(int *p) { atomicAdd(p, 1); }

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    bool wait = argc > 2;
    int *d = nullptr;
    if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) return 2;
    cudaMemset(d, 0, sizeof(int));
    cudaDeviceSynchronize();
    printf("ready\n");
    fflush(stdout);
    if (wait) {
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 3;
    }
    for (int i = 0; i < n; i++) count_one<<<1, 1>>>(d);
    int h = 0;
    cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
    printf("done %d %s\n", h, h == n ? "ok" : "wrong");
    return h == n ? 0 : 1;
}
