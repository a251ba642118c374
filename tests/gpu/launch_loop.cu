// Launch rate of an empty kernel: `launch_loop N` prints launches per second
// of N back-to-back launches on the default stream (static cudart; each goes
// through the driver's cuLaunchKernel, so through libkrex.so when preloaded).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void empty_kernel() {}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000;
    for (int i = 0; i < 20000; i++) empty_kernel<<<1, 1>>>();  // warm: clocks, queues
    cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; i++) empty_kernel<<<1, 1>>>();
    cudaDeviceSynchronize();
    auto t1 = std::chrono::steady_clock::now();
    double s = std::chrono::duration<double>(t1 - t0).count();
    if (cudaGetLastError() != cudaSuccess) return 1;
    printf("%.1f\n", n / s);
    return 0;
}
