// Deliberate bug: the upper half of each warp returns early, then the lower half shuffles with a
// full mask. The exited lanes can never take part, so the values they "send" are undefined; a GPU
// runs on and returns garbage. The emulator must report the lane missing from the mask.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void half_warp_sum(const int* in, int* out) {
    int lane = threadIdx.x % 32;
    if (lane >= 16) return;  // BUG: these lanes are still named in the mask below
    int v = in[threadIdx.x];
    for (int offset = 8; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
    if (lane == 0) out[threadIdx.x / 32] = v;
}

int main() {
    int h[64];
    for (int i = 0; i < 64; ++i) h[i] = 1;
    int *d_in, *d_out;
    cudaMalloc(&d_in, sizeof(h));
    cudaMalloc(&d_out, 2 * sizeof(int));
    cudaMemcpy(d_in, h, sizeof(h), cudaMemcpyHostToDevice);
    half_warp_sum<<<1, 64>>>(d_in, d_out);
    cudaDeviceSynchronize();
    int out[2] = {0, 0};
    cudaMemcpy(out, d_out, sizeof(out), cudaMemcpyDeviceToHost);
    printf("bug shfl_exited_lanes: sums %d %d\n", out[0], out[1]);
    return 0;
}
