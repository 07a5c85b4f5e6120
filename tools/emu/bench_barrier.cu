// The emulator's speed benchmark (run by tools/emu_bench.py): 64 blocks of 256 threads, each
// thread passing a __syncthreads() barrier 10 times while the block shuffles values through
// shared memory. Prints how long the launch took on the emulator.
#include <chrono>
#include <cstdio>
#include <cuda_runtime.h>

__global__ void barrier_loop(const float* in, float* out, int iterations) {
    __shared__ float buf[256];
    int t = threadIdx.x;
    float v = in[blockIdx.x * blockDim.x + t];
    for (int it = 0; it < iterations; ++it) {
        buf[t] = v;
        __syncthreads();
        v = 0.5f * (v + buf[(t + 1) % blockDim.x]);
    }
    out[blockIdx.x * blockDim.x + t] = v;
}

int main() {
    const int blocks = 64, threads = 256, n = blocks * threads;
    float* h = new float[n];
    for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i % 97);
    float *d_in, *d_out;
    cudaMalloc(&d_in, n * sizeof(float));
    cudaMalloc(&d_out, n * sizeof(float));
    cudaMemcpy(d_in, h, n * sizeof(float), cudaMemcpyHostToDevice);
    auto t0 = std::chrono::steady_clock::now();
    barrier_loop<<<blocks, threads>>>(d_in, d_out, 10);
    cudaDeviceSynchronize();
    auto t1 = std::chrono::steady_clock::now();
    cudaMemcpy(h, d_out, n * sizeof(float), cudaMemcpyDeviceToHost);
    double s = std::chrono::duration<double>(t1 - t0).count();
    printf("emu bench: %d blocks x %d threads x 10 barriers: %.4f s (checksum %.3f)\n", blocks, threads, s, h[0] + h[n - 1]);
    return 0;
}
