// Deliberate bug: each thread reads its right neighbour's element of a dynamic shared memory tile,
// and the last thread reads one element past the end of the dynamic shared memory. The emulator
// places dynamic shared memory right before a guard page, so it reports the read.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void neighbour_diff(const float* in, float* out) {
    extern __shared__ float tile[];
    int t = threadIdx.x;
    tile[t] = in[blockIdx.x * blockDim.x + t];
    __syncthreads();
    out[blockIdx.x * blockDim.x + t] = tile[t + 1] - tile[t];  // BUG: t + 1 == blockDim.x
}

int main() {
    const int n = 256;
    float h[n];
    for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i * i);
    float *d_in, *d_out;
    cudaMalloc(&d_in, sizeof(h));
    cudaMalloc(&d_out, sizeof(h));
    cudaMemcpy(d_in, h, sizeof(h), cudaMemcpyHostToDevice);
    neighbour_diff<<<2, 128, 128 * sizeof(float)>>>(d_in, d_out);
    cudaError_t err = cudaDeviceSynchronize();
    printf("bug smem_oob_read: sync says \"%s\"\n", cudaGetErrorString(err));
    return 0;
}
