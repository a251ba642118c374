// Launch rate of an empty kernel: `launch_loop N` prints launches per second
// of N back-to-back launches on the default stream (static cudart; each goes
// through the driver's cuLaunchKernel, so through libkrex.so when preloaded),
// then the nanoseconds of one cudaEventElapsedTime on the two events recorded
// around those launches (where the library judges the window's integrity,
// when its tenant holds its region).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void empty_kernel() {}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000;
    cudaEvent_t start, end;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&end) != cudaSuccess) return 1;
    for (int i = 0; i < 20000; i++) empty_kernel<<<1, 1>>>();  // warm: clocks, queues
    cudaDeviceSynchronize();
    cudaEventRecord(start);
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; i++) empty_kernel<<<1, 1>>>();
    cudaEventRecord(end);
    cudaDeviceSynchronize();
    auto t1 = std::chrono::steady_clock::now();
    float ms = 0;
    auto q0 = std::chrono::steady_clock::now();
    cudaError_t elapsed = cudaEventElapsedTime(&ms, start, end);
    auto q1 = std::chrono::steady_clock::now();
    double s = std::chrono::duration<double>(t1 - t0).count();
    if (elapsed != cudaSuccess || cudaGetLastError() != cudaSuccess) return 1;
    printf("%.1f %.0f\n", n / s, std::chrono::duration<double, std::nano>(q1 - q0).count());
    return 0;
}
