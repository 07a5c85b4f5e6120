// Streams, events and asynchronous copies: two streams (one non-blocking) each copy a chunk in,
// scale it and copy it out; a third kernel waits on both through cudaStreamWaitEvent; pinned host
// memory, cudaMemsetAsync, device-to-device and 2-D copies, cudaMemcpyDefault, __constant__ and
// __device__ symbols. Timings are only checked to be non-negative, never printed.
#include <cstdio>
#include "check.cuh"

__constant__ float kScale[2];
__device__ int g_calls;

__global__ void scale(float* x, int n, int which) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= kScale[which];
    if (i == 0) atomicAdd(&g_calls, 1);
}

__global__ void combine(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

int main() {
    Checker check("streams_events");
    const int n = 4096, half = n / 2;
    float *h_in, *h_out;
    CUDA_CHECK(cudaMallocHost(&h_in, n * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&h_out, n * sizeof(float)));
    for (int i = 0; i < n; ++i) h_in[i] = static_cast<float>(i % 64);
    const float scales[2] = {2.0f, -0.5f};
    CUDA_CHECK(cudaMemcpyToSymbol(kScale, scales, sizeof(scales)));
    int zero = 0;
    CUDA_CHECK(cudaMemcpyToSymbol(g_calls, &zero, sizeof(int)));

    float *d_x, *d_y, *d_sum;
    CUDA_CHECK(cudaMalloc(&d_x, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_y, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_sum, half * sizeof(float)));
    cudaStream_t s0, s1;
    CUDA_CHECK(cudaStreamCreate(&s0));
    CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    cudaEvent_t start, done0, done1, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventCreateWithFlags(&done0, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&done1, cudaEventDisableTiming));

    CUDA_CHECK(cudaEventRecord(start, s0));
    CUDA_CHECK(cudaMemsetAsync(d_x, 0, n * sizeof(float), s0));
    CUDA_CHECK(cudaMemcpyAsync(d_x, h_in, half * sizeof(float), cudaMemcpyHostToDevice, s0));
    CUDA_CHECK(cudaMemcpyAsync(d_x + half, h_in + half, half * sizeof(float), cudaMemcpyHostToDevice, s1));
    scale<<<(half + 255) / 256, 256, 0, s0>>>(d_x, half, 0);
    scale<<<(half + 255) / 256, 256, 0, s1>>>(d_x + half, half, 1);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventRecord(done0, s0));
    CUDA_CHECK(cudaEventRecord(done1, s1));
    CUDA_CHECK(cudaStreamWaitEvent(s0, done1, 0));
    combine<<<(half + 255) / 256, 256, 0, s0>>>(d_x, d_x + half, d_sum, half);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpyAsync(h_out, d_x, n * sizeof(float), cudaMemcpyDeviceToHost, s0));
    CUDA_CHECK(cudaEventRecord(stop, s0));
    CUDA_CHECK(cudaStreamSynchronize(s0));
    CUDA_CHECK(cudaStreamSynchronize(s1));
    CUDA_CHECK(cudaEventSynchronize(stop));
    printf("cudaEventQuery(stop) after sync: %s\n", cudaGetErrorName(cudaEventQuery(stop)));
    printf("cudaStreamQuery(s1) after sync: %s\n", cudaGetErrorName(cudaStreamQuery(s1)));
    float ms = -1.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    check.expect(ms >= 0.0f, "elapsed time is non-negative");
    printf("elapsed time between start and stop is non-negative: %s\n", ms >= 0.0f ? "yes" : "no");
    cudaError_t no_timing = cudaEventElapsedTime(&ms, done0, done1);
    printf("elapsed time of events without timing: %s\n", cudaGetErrorName(no_timing));
    cudaGetLastError();

    double sum_scaled = 0;
    for (int i = 0; i < n; ++i) {
        float want = h_in[i] * scales[i < half ? 0 : 1];
        check.expect(h_out[i] == want, "scaled value");
        sum_scaled += h_out[i];
    }
    float h_sum[half];
    CUDA_CHECK(cudaMemcpy(h_sum, d_sum, sizeof(h_sum), cudaMemcpyDefault));  // direction from the pointers
    double sum_combined = 0;
    for (int i = 0; i < half; ++i) {
        check.expect(h_sum[i] == h_out[i] + h_out[i + half], "combined value");
        sum_combined += h_sum[i];
    }
    int calls = 0;
    CUDA_CHECK(cudaMemcpyFromSymbol(&calls, g_calls, sizeof(int)));
    check.expect_eq(calls, 2, "__device__ counter");
    printf("scaled sum %.1f, combined sum %.1f, h_out[1] %.1f h_out[%d] %.1f, scale kernels %d\n", sum_scaled,
           sum_combined, h_out[1], half + 1, h_out[half + 1], calls);

    // Device-to-device and pitched 2-D copies: take a 5 x 3 window out of a 16-wide matrix.
    CUDA_CHECK(cudaMemcpy(d_y, d_x, n * sizeof(float), cudaMemcpyDeviceToDevice));
    float window[3][5];
    CUDA_CHECK(cudaMemcpy2D(window, 5 * sizeof(float), d_y + 2 * 16 + 4, 16 * sizeof(float), 5 * sizeof(float), 3,
                            cudaMemcpyDeviceToHost));
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 5; ++c) check.expect(window[r][c] == h_out[(2 + r) * 16 + 4 + c], "2-D copy");
    printf("2-D window row 0: %.0f %.0f %.0f %.0f %.0f, row 2 ends with %.0f\n", window[0][0], window[0][1],
           window[0][2], window[0][3], window[0][4], window[2][4]);

    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaEventDestroy(done0));
    CUDA_CHECK(cudaEventDestroy(done1));
    CUDA_CHECK(cudaStreamDestroy(s0));
    CUDA_CHECK(cudaStreamDestroy(s1));
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_y));
    CUDA_CHECK(cudaFree(d_sum));
    CUDA_CHECK(cudaFreeHost(h_in));
    CUDA_CHECK(cudaFreeHost(h_out));
    return check.finish();
}
