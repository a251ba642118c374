// A CUDA C++ program as nvcc builds it (registration, kernel<<<>>>, cudaEvent
// timing), whose kernel follows the simulated driver's convention (duration
// in ns, counter): tests/commands/test_forwarded.py builds it where nvcc exists and
// runs it on the simulator, with -cudart shared (forwarded mode's libcudart,
// in process and forwarded mode) and with nvcc's default static cudart.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void count(unsigned long long ns, unsigned long long *counter)
{
    if (counter != nullptr && threadIdx.x == 0 && blockIdx.x == 0)
        atomicAdd(counter, 1ull);
}

int main()
{
    unsigned long long *counter = nullptr;
    cudaError_t err = cudaMalloc(&counter, sizeof *counter);
    if (err != cudaSuccess) {
        printf("cudaMalloc: %s\n", cudaGetErrorName(err));
        return 2;
    }
    cudaMemset(counter, 0, sizeof *counter);
    cudaEvent_t start, end;
    cudaEventCreate(&start);
    cudaEventCreate(&end);
    cudaEventRecord(start);
    for (int i = 0; i < 5; i++)
        count<<<2, 64>>>(1000000ull, counter);
    cudaEventRecord(end);
    cudaEventSynchronize(end);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, end);
    unsigned long long counted = 0;
    cudaMemcpy(&counted, counter, sizeof counted, cudaMemcpyDeviceToHost);
    printf("counted %llu, timing %s, last error %s\n", counted, ms >= 5.0f ? "covers the kernels" : "wrong",
           cudaGetErrorName(cudaGetLastError()));
    return 0;
}
