// Device printf: integer, hex, character, string, field-width and floating point formats, from a
// __device__ helper and from a kernel. Threads print one after the other (a barrier between
// turns) and launches are synchronised before the host prints, so the order is deterministic.
#include <cstdio>
#include <cuda_fp16.h>
#include "check.cuh"

__device__ void describe(int who, float value) {
    printf("  thread %d: value %.3f, scientific %e, fixed %8.2f|\n", who, value, value * 1000.0f, value);
}

__global__ void turns(const float* values) {
    for (int turn = 0; turn < blockDim.x; ++turn) {
        if (threadIdx.x == turn) {
            printf("turn %d of %u (block %u): d=%d u=%u x=%x X=%X c=%c s=%s |%5d|%-5d|%05d|\n", turn, blockDim.x,
                   blockIdx.x, -turn * 7, 4000000000u - turn, 255 + turn, 0xabc0 + turn, 'A' + turn, "ok", turn,
                   turn * 11, turn * 3);
            describe(turn, values[turn]);
        }
        __syncthreads();
    }
}

__global__ void wide(long long big, unsigned long long ubig, double d, __half h) {
    printf("wide: ld %ld lld %lld llu %llu f %f g %g half %.4f percent %%\n", static_cast<long>(big), big, ubig, d, d,
           __half2float(h));
}

int main() {
    Checker check("device_printf");
    const float values[4] = {1.5f, -0.25f, 3.14159f, 1234.5f};  // no rounding ties in the formats below
    float* d_values;
    CUDA_CHECK(cudaMalloc(&d_values, sizeof(values)));
    CUDA_CHECK(cudaMemcpy(d_values, values, sizeof(values), cudaMemcpyHostToDevice));
    printf("host: before the first launch\n");
    fflush(stdout);
    turns<<<1, 4>>>(d_values);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    fflush(stdout);
    printf("host: between launches\n");
    fflush(stdout);
    for (int k = 0; k < 3; ++k) {
        wide<<<1, 1>>>(-(1LL << 40) - k, (1ULL << 63) + k, 2.5 * k - 1.0, __float2half(0.5f * k));
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaDeviceSynchronize());
        fflush(stdout);
    }
    printf("host: after the last launch\n");
    return check.finish();
}
