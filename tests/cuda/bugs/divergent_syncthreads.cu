// Deliberate bug: only the even threads reach the first __syncthreads(); the odd ones go straight
// to the second. On a GPU both are the same hardware barrier, so the block does not hang, but the
// odd threads read the tile before the even threads' writes are guaranteed to be visible. The
// emulator must report the barrier divergence with the kernel, the block and the waiting threads.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void divergent_tile(const int* in, int* out) {
    __shared__ int tile[128];
    int t = threadIdx.x;
    if (t % 2 == 0) {
        tile[t] = in[t];
        tile[t + 1] = in[t + 1];
        __syncthreads();  // BUG: only half of the block gets here
    }
    __syncthreads();
    out[t] = tile[127 - t];
}

int main() {
    int h[128];
    for (int i = 0; i < 128; ++i) h[i] = i;
    int *d_in, *d_out;
    cudaMalloc(&d_in, sizeof(h));
    cudaMalloc(&d_out, sizeof(h));
    cudaMemcpy(d_in, h, sizeof(h), cudaMemcpyHostToDevice);
    divergent_tile<<<2, 128>>>(d_in, d_out);
    cudaDeviceSynchronize();
    cudaMemcpy(h, d_out, sizeof(h), cudaMemcpyDeviceToHost);
    printf("bug divergent_syncthreads: out[0] = %d\n", h[0]);
    return 0;
}
