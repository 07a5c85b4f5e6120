// Device properties that an H200 reports (and that the emulator imitates): compute capability,
// warp size, thread/block/grid limits, shared memory, registers and multiprocessors, read through
// both cudaGetDeviceProperties and cudaDeviceGetAttribute, which must agree.
#include <cstdio>
#include "check.cuh"

int main() {
    Checker check("device_query");
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    check.expect(count >= 1, "at least one device", count, 1);
    printf("devices: at least one: %s\n", count >= 1 ? "yes" : "no");
    CUDA_CHECK(cudaSetDevice(0));
    int device = -1;
    CUDA_CHECK(cudaGetDevice(&device));
    printf("current device %d\n", device);
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    printf("compute capability %d.%d\n", p.major, p.minor);
    printf("warpSize %d, maxThreadsPerBlock %d, maxThreadsDim %d %d %d\n", p.warpSize, p.maxThreadsPerBlock,
           p.maxThreadsDim[0], p.maxThreadsDim[1], p.maxThreadsDim[2]);
    printf("maxGridSize %d %d %d\n", p.maxGridSize[0], p.maxGridSize[1], p.maxGridSize[2]);
    printf("sharedMemPerBlock %zu, sharedMemPerBlockOptin %zu, sharedMemPerMultiprocessor %zu\n", p.sharedMemPerBlock,
           p.sharedMemPerBlockOptin, p.sharedMemPerMultiprocessor);
    printf("regsPerBlock %d, regsPerMultiprocessor %d, totalConstMem %zu\n", p.regsPerBlock, p.regsPerMultiprocessor,
           p.totalConstMem);
    printf("multiProcessorCount %d, maxThreadsPerMultiProcessor %d, maxBlocksPerMultiProcessor %d\n",
           p.multiProcessorCount, p.maxThreadsPerMultiProcessor, p.maxBlocksPerMultiProcessor);
    printf("totalGlobalMem above 100 GB: %s\n", p.totalGlobalMem > 100ull * 1000 * 1000 * 1000 ? "yes" : "no");
    printf("unifiedAddressing %d, concurrentKernels %d\n", p.unifiedAddressing, p.concurrentKernels);

    struct Attr { cudaDeviceAttr attr; const char* name; long long want; };
    const Attr attrs[] = {
        {cudaDevAttrMaxThreadsPerBlock, "MaxThreadsPerBlock", p.maxThreadsPerBlock},
        {cudaDevAttrMaxBlockDimX, "MaxBlockDimX", p.maxThreadsDim[0]},
        {cudaDevAttrMaxBlockDimZ, "MaxBlockDimZ", p.maxThreadsDim[2]},
        {cudaDevAttrMaxGridDimX, "MaxGridDimX", p.maxGridSize[0]},
        {cudaDevAttrMaxGridDimY, "MaxGridDimY", p.maxGridSize[1]},
        {cudaDevAttrMaxSharedMemoryPerBlock, "MaxSharedMemoryPerBlock", static_cast<long long>(p.sharedMemPerBlock)},
        {cudaDevAttrMaxSharedMemoryPerBlockOptin, "MaxSharedMemoryPerBlockOptin",
         static_cast<long long>(p.sharedMemPerBlockOptin)},
        {cudaDevAttrWarpSize, "WarpSize", p.warpSize},
        {cudaDevAttrMultiProcessorCount, "MultiProcessorCount", p.multiProcessorCount},
        {cudaDevAttrComputeCapabilityMajor, "ComputeCapabilityMajor", p.major},
        {cudaDevAttrComputeCapabilityMinor, "ComputeCapabilityMinor", p.minor},
        {cudaDevAttrMaxRegistersPerBlock, "MaxRegistersPerBlock", p.regsPerBlock},
    };
    for (const Attr& a : attrs) {
        int v = -1;
        CUDA_CHECK(cudaDeviceGetAttribute(&v, a.attr, 0));
        check.expect_eq(v, a.want, a.name);
        printf("attribute %-28s %d\n", a.name, v);
    }
    return check.finish();
}
