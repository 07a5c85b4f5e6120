// Deliberate bug: an off-by-one bound (`i <= n`) makes one thread write one float past the end of
// a 1000-float buffer. An H200 accepts this silently (the write lands in the slack of the
// allocation); the emulator must report it, naming the kernel, block and thread.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void fill_ramp(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 0.5f * i;  // BUG: should be i < n
}

int main() {
    const int n = 1000;  // 4000 bytes: not a multiple of the page size
    float* d = nullptr;
    cudaMalloc(&d, n * sizeof(float));
    fill_ramp<<<(n + 255) / 256, 256>>>(d, n);
    cudaError_t err = cudaDeviceSynchronize();
    float last = 0.0f;
    cudaMemcpy(&last, d + n - 1, sizeof(float), cudaMemcpyDeviceToHost);
    printf("bug oob_global_write: sync says \"%s\", out[n-1] = %.1f\n", cudaGetErrorString(err), last);
    cudaFree(d);
    return 0;
}
