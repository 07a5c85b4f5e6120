// Launch-configuration errors as cudaGetLastError reports them: too many threads per block, a
// zero-sized grid, oversized block and grid dimensions, too much dynamic shared memory with and
// without the opt-in attribute; get-versus-peek semantics; failing runtime calls; and that every
// error is non-sticky (a good launch afterwards works).
#include <cstdio>
#include "check.cuh"

__global__ void touch(int* out) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *out += 1;
}

__global__ void big_smem(int* out, int n) {
    extern __shared__ int buf[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = i;
    __syncthreads();
    if (threadIdx.x == 0) {
        long long sum = 0;
        for (int i = 0; i < n; ++i) sum += buf[i];
        *out = static_cast<int>(sum % 1000003);
    }
}

static void report(const char* what, cudaError_t err) {
    printf("%-40s -> %d %s \"%s\"\n", what, static_cast<int>(err), cudaGetErrorName(err), cudaGetErrorString(err));
}

int main() {
    Checker check("launch_errors");
    int* d;
    CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
    CUDA_CHECK(cudaMemset(d, 0, sizeof(int)));

    report("initial cudaGetLastError", cudaGetLastError());
    touch<<<1, 1025>>>(d);
    report("<<<1, 1025>>>", cudaGetLastError());
    report("cudaGetLastError again", cudaGetLastError());
    touch<<<0, 32>>>(d);
    report("<<<0, 32>>>", cudaGetLastError());
    touch<<<1, 0>>>(d);
    report("<<<1, 0>>>", cudaGetLastError());
    touch<<<dim3(1, 1, 1), dim3(1, 1, 65)>>>(d);
    report("block (1,1,65)", cudaGetLastError());
    touch<<<dim3(1, 1, 1), dim3(2048, 1, 1)>>>(d);
    report("block (2048,1,1)", cudaGetLastError());
    touch<<<dim3(1, 1, 1), dim3(64, 32, 1)>>>(d);
    report("block (64,32,1) = 2048 threads", cudaGetLastError());
    touch<<<dim3(1, 65536, 1), 32>>>(d);
    report("grid (1,65536,1)", cudaGetLastError());
    touch<<<dim3(1, 1, 65536), 32>>>(d);
    report("grid (1,1,65536)", cudaGetLastError());

    // Legal extremes.
    touch<<<1, 1024>>>(d);
    report("<<<1, 1024>>>", cudaGetLastError());
    touch<<<dim3(1, 1, 1), dim3(32, 32, 1)>>>(d);
    report("block (32,32,1)", cudaGetLastError());
    touch<<<dim3(1, 1, 1), dim3(1, 1, 64)>>>(d);
    report("block (1,1,64)", cudaGetLastError());
    touch<<<dim3(1, 65535, 1), 1>>>(d);
    report("grid (1,65535,1)", cudaGetLastError());

    // Peek does not clear the error; get does.
    touch<<<1, 4096>>>(d);
    report("<<<1, 4096>>> then peek", cudaPeekAtLastError());
    report("peek again", cudaPeekAtLastError());
    report("get", cudaGetLastError());
    report("get again", cudaGetLastError());

    // Dynamic shared memory: 48 KB is the default limit, more needs the opt-in attribute.
    const int n48 = 48 * 1024 / 4, n64 = 64 * 1024 / 4;
    big_smem<<<1, 256, 48 * 1024>>>(d, n48);
    report("48 KB dynamic smem", cudaGetLastError());
    big_smem<<<1, 256, 48 * 1024 + 4>>>(d, n48 + 1);
    report("48 KB + 4 dynamic smem", cudaGetLastError());
    big_smem<<<1, 256, 64 * 1024>>>(d, n64);
    report("64 KB dynamic smem, no attribute", cudaGetLastError());
    report("set max dynamic smem 64 KB",
           cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    big_smem<<<1, 256, 64 * 1024>>>(d, n64);
    report("64 KB dynamic smem, with attribute", cudaGetLastError());
    int sum = -1;
    CUDA_CHECK(cudaMemcpy(&sum, d, sizeof(int), cudaMemcpyDeviceToHost));
    long long want = (static_cast<long long>(n64) * (n64 - 1) / 2) % 1000003;
    check.expect_eq(sum, want, "64 KB shared memory kernel result");
    printf("64 KB kernel result %d\n", sum);
    big_smem<<<1, 256, 80 * 1024>>>(d, 80 * 1024 / 4);
    report("80 KB dynamic smem, 64 KB attribute", cudaGetLastError());
    report("set max dynamic smem 227 KB",
           cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
    big_smem<<<1, 256, 227 * 1024>>>(d, 227 * 1024 / 4);
    report("227 KB dynamic smem", cudaGetLastError());
    report("set max dynamic smem 228 KB",
           cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024));
    report("cudaGetLastError after failed attribute", cudaGetLastError());

    // Failing runtime calls set the last error too.
    void* huge = nullptr;
    report("cudaMalloc 1 PB", cudaMalloc(&huge, 1ull << 50));
    report("cudaGetLastError after cudaMalloc", cudaGetLastError());
    report("cudaSetDevice(7)", cudaSetDevice(7));
    report("cudaGetLastError after cudaSetDevice", cudaGetLastError());
    report("cudaSetDevice(0)", cudaSetDevice(0));

    // None of the errors above is sticky: a good launch still works.
    CUDA_CHECK(cudaMemset(d, 0, sizeof(int)));
    touch<<<2, 64>>>(d);
    report("good launch at the end", cudaGetLastError());
    report("cudaDeviceSynchronize", cudaDeviceSynchronize());
    int value = -1;
    CUDA_CHECK(cudaMemcpy(&value, d, sizeof(int), cudaMemcpyDeviceToHost));
    check.expect_eq(value, 1, "good launch result");
    printf("good launch result %d\n", value);
    return check.finish();
}
