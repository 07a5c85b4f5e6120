// emu_cuda.h: the CUDA C++ dialect on top of standard C++17, for the minisgl CPU emulator.
//
// tools/emu_kernels.py force-includes this header into every program (nvcc implicitly includes
// cuda_runtime.h, so we do the same) and rewrites the few pieces of CUDA syntax that are not
// plain C++ (kernel launches and __shared__ declarations) into calls of the functions below.
//
// Everything a kernel can observe about its position (threadIdx, blockIdx, ...) lives in globals
// that the scheduler in emu_runtime.cpp updates before it resumes a CUDA thread. Every CUDA thread
// runs on its own coroutine stack; barriers and warp collectives are calls into the runtime that
// suspend the calling thread until its partners have arrived.
#pragma once

#define MINISGL_CUDA_EMULATOR 1
#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
// The CUDA version the emulator imitates (13.0 by default, what the H200 machines here run).
// tools/emu_kernels.py passes -DMINISGL_EMU_CUDA_VERSION=12040 when MINISGL_EMU_CUDA_VERSION=12.4
// is set; the runtime then reports launch-configuration errors the way CUDA 12 did.
#ifndef MINISGL_EMU_CUDA_VERSION
#define MINISGL_EMU_CUDA_VERSION 13000
#endif
#define __CUDACC_VER_MAJOR__ (MINISGL_EMU_CUDA_VERSION / 1000)
#define __CUDACC_VER_MINOR__ (MINISGL_EMU_CUDA_VERSION % 1000 / 10)
#define __CUDACC_VER_BUILD__ 0
#define CUDART_VERSION MINISGL_EMU_CUDA_VERSION
#define CUDA_VERSION MINISGL_EMU_CUDA_VERSION

#include <cassert>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

// ---------------------------------------------------------------------------------------------
// Qualifiers. Host and device code share one address space here, so they all vanish.
// `__shared__` is normally rewritten by emu_kernels.py; the macro is only a fallback for
// declarations the rewrite cannot see (for example ones built by token pasting).
// ---------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __shared__ static
#define __forceinline__ inline
// __noinline__ is rewritten by emu_kernels.py, not defined here: libstdc++ itself spells
// __attribute__((__noinline__)), which a macro of that name would break.
#define __launch_bounds__(...)
#define __maxnreg__(...)
#define __grid_constant__
#define __align__(n) alignas(n)
#define __builtin_align__(n) alignas(n)
#define __device_builtin__
#define __cudart_builtin__
#define CUDART_CB
#define CUDARTAPI

// ---------------------------------------------------------------------------------------------
// Vector types, with CUDA's alignments: a 2-vector is aligned to twice, a 4-vector to four times
// its element size (capped at 16); 1- and 3-vectors keep the element's own alignment.
// ---------------------------------------------------------------------------------------------
#define EMU_VECTOR_TYPES(T, NAME)                                                               \
    struct NAME##1 { T x; };                                                                    \
    struct alignas(2 * sizeof(T) > 16 ? 16 : 2 * sizeof(T)) NAME##2 { T x, y; };                \
    struct NAME##3 { T x, y, z; };                                                              \
    struct alignas(4 * sizeof(T) > 16 ? 16 : 4 * sizeof(T)) NAME##4 { T x, y, z, w; };          \
    inline NAME##1 make_##NAME##1(T x) { return NAME##1{x}; }                                   \
    inline NAME##2 make_##NAME##2(T x, T y) { return NAME##2{x, y}; }                           \
    inline NAME##3 make_##NAME##3(T x, T y, T z) { return NAME##3{x, y, z}; }                   \
    inline NAME##4 make_##NAME##4(T x, T y, T z, T w) { return NAME##4{x, y, z, w}; }

EMU_VECTOR_TYPES(signed char, char)
EMU_VECTOR_TYPES(unsigned char, uchar)
EMU_VECTOR_TYPES(short, short)
EMU_VECTOR_TYPES(unsigned short, ushort)
EMU_VECTOR_TYPES(int, int)
EMU_VECTOR_TYPES(unsigned int, uint)
EMU_VECTOR_TYPES(long, long)
EMU_VECTOR_TYPES(unsigned long, ulong)
EMU_VECTOR_TYPES(long long, longlong)
EMU_VECTOR_TYPES(unsigned long long, ulonglong)
EMU_VECTOR_TYPES(float, float)
EMU_VECTOR_TYPES(double, double)
#undef EMU_VECTOR_TYPES

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ---------------------------------------------------------------------------------------------
// Runtime API types.
// ---------------------------------------------------------------------------------------------
enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorCudartUnloading = 4,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidPitchValue = 12,
    cudaErrorInvalidSymbol = 13,
    cudaErrorInvalidHostPointer = 16,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidKernelImage = 200,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotFound = 500,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchTimeout = 702,
    cudaErrorAssert = 710,
    cudaErrorHardwareStackError = 714,
    cudaErrorIllegalInstruction = 715,
    cudaErrorMisalignedAddress = 716,
    cudaErrorInvalidAddressSpace = 717,
    cudaErrorInvalidPc = 718,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotPermitted = 800,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
    cudaFuncAttributeClusterDimMustBeSet = 10,
    cudaFuncAttributeRequiredClusterWidth = 11,
    cudaFuncAttributeRequiredClusterHeight = 12,
    cudaFuncAttributeRequiredClusterDepth = 13,
    cudaFuncAttributeNonPortableClusterSizeAllowed = 14,
    cudaFuncAttributeClusterSchedulingPolicyPreference = 15,
};

enum cudaFuncCache {
    cudaFuncCachePreferNone = 0,
    cudaFuncCachePreferShared = 1,
    cudaFuncCachePreferL1 = 2,
    cudaFuncCachePreferEqual = 3,
};

enum cudaSharedMemConfig {
    cudaSharedMemBankSizeDefault = 0,
    cudaSharedMemBankSizeFourByte = 1,
    cudaSharedMemBankSizeEightByte = 2,
};

enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3,
};

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxBlockDimX = 2,
    cudaDevAttrMaxBlockDimY = 3,
    cudaDevAttrMaxBlockDimZ = 4,
    cudaDevAttrMaxGridDimX = 5,
    cudaDevAttrMaxGridDimY = 6,
    cudaDevAttrMaxGridDimZ = 7,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrTotalConstantMemory = 9,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMaxPitch = 11,
    cudaDevAttrMaxRegistersPerBlock = 12,
    cudaDevAttrClockRate = 13,
    cudaDevAttrTextureAlignment = 14,
    cudaDevAttrGpuOverlap = 15,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrKernelExecTimeout = 17,
    cudaDevAttrIntegrated = 18,
    cudaDevAttrCanMapHostMemory = 19,
    cudaDevAttrComputeMode = 20,
    cudaDevAttrConcurrentKernels = 31,
    cudaDevAttrEccEnabled = 32,
    cudaDevAttrMemoryClockRate = 36,
    cudaDevAttrGlobalMemoryBusWidth = 37,
    cudaDevAttrL2CacheSize = 38,
    cudaDevAttrMaxThreadsPerMultiProcessor = 39,
    cudaDevAttrAsyncEngineCount = 40,
    cudaDevAttrUnifiedAddressing = 41,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrMaxRegistersPerMultiprocessor = 82,
    cudaDevAttrManagedMemory = 83,
    cudaDevAttrCooperativeLaunch = 95,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
    cudaDevAttrMaxBlocksPerMultiprocessor = 106,
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    size_t memPitch;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];  // CUDA 13 dropped clockRate and memoryClockRate: use cudaDeviceGetAttribute
    size_t totalConstMem;
    int major;
    int minor;
    size_t textureAlignment;
    size_t texturePitchAlignment;
    int deviceOverlap;
    int multiProcessorCount;
    int kernelExecTimeoutEnabled;
    int integrated;
    int canMapHostMemory;
    int computeMode;
    int concurrentKernels;
    int ECCEnabled;
    int pciBusID;
    int pciDeviceID;
    int pciDomainID;
    int tccDriver;
    int asyncEngineCount;
    int unifiedAddressing;
    int memoryBusWidth;
    int l2CacheSize;
    int persistingL2CacheMaxSize;
    int maxThreadsPerMultiProcessor;
    int streamPrioritiesSupported;
    int globalL1CacheSupported;
    int localL1CacheSupported;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor;
    int managedMemory;
    int isMultiGpuBoard;
    int multiGpuBoardGroupID;
    int hostNativeAtomicSupported;
    int pageableMemoryAccess;
    int concurrentManagedAccess;
    int computePreemptionSupported;
    int cooperativeLaunch;
    size_t sharedMemPerBlockOptin;
    int maxBlocksPerMultiProcessor;
    int accessPolicyMaxWindowSize;
    size_t reservedSharedMemPerBlock;
};

struct cudaFuncAttributes {
    size_t sharedSizeBytes;
    size_t constSizeBytes;
    size_t localSizeBytes;
    int maxThreadsPerBlock;
    int numRegs;
    int ptxVersion;
    int binaryVersion;
    int cacheModeCA;
    int maxDynamicSharedSizeBytes;
    int preferredShmemCarveout;
};

struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void* devicePointer;
    void* hostPointer;
};

struct CUstream_st;
struct CUevent_st;
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;

#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaEventInterprocess 0x04
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaHostRegisterDefault 0x00
#define cudaMemAttachGlobal 0x01
#define cudaDeviceScheduleAuto 0x00
#define cudaDeviceMapHost 0x08

// ---------------------------------------------------------------------------------------------
// Runtime API functions (defined in emu_runtime.cpp).
// ---------------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** ptr, size_t size);
cudaError_t cudaMallocManaged(void** ptr, size_t size, unsigned int flags = cudaMemAttachGlobal);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t size);
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags);
cudaError_t cudaHostUnregister(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream = 0);
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream = 0);
cudaError_t cudaMemset(void* ptr, int value, size_t count);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream = 0);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

cudaError_t cudaDeviceSynchronize();
cudaError_t cudaThreadSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaSetDeviceFlags(unsigned int flags);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);

// Typed conveniences that cuda_runtime.h also offers.
template <class T>
cudaError_t cudaMalloc(T** ptr, size_t size) { return cudaMalloc(reinterpret_cast<void**>(ptr), size); }
template <class T>
cudaError_t cudaMallocManaged(T** ptr, size_t size, unsigned int flags = cudaMemAttachGlobal) {
    return cudaMallocManaged(reinterpret_cast<void**>(ptr), size, flags);
}
template <class T>
cudaError_t cudaMallocHost(T** ptr, size_t size) {
    return cudaMallocHost(reinterpret_cast<void**>(ptr), size);
}
template <class T>
cudaError_t cudaHostAlloc(T** ptr, size_t size, unsigned int flags) {
    return cudaHostAlloc(reinterpret_cast<void**>(ptr), size, flags);
}

// __device__ and __constant__ variables are ordinary globals here.
template <class T>
cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t count, size_t offset = 0,
                               cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    if (offset + count > sizeof(T)) return cudaErrorInvalidValue;
    std::memcpy(reinterpret_cast<char*>(&symbol) + offset, src, count);
    return (void)kind, cudaSuccess;
}
template <class T>
cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t count, size_t offset = 0,
                                 cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    if (offset + count > sizeof(T)) return cudaErrorInvalidValue;
    std::memcpy(dst, reinterpret_cast<const char*>(&symbol) + offset, count);
    return (void)kind, cudaSuccess;
}
template <class T>
cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* src, size_t count, size_t offset = 0,
                                    cudaMemcpyKind kind = cudaMemcpyHostToDevice,
                                    cudaStream_t = 0) {
    return cudaMemcpyToSymbol(symbol, src, count, offset, kind);
}
template <class T>
cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const T& symbol, size_t count, size_t offset = 0,
                                      cudaMemcpyKind kind = cudaMemcpyDeviceToHost,
                                      cudaStream_t = 0) {
    return cudaMemcpyFromSymbol(dst, symbol, count, offset, kind);
}
template <class T>
cudaError_t cudaGetSymbolAddress(void** ptr, T& symbol) {
    *ptr = reinterpret_cast<void*>(&symbol);
    return cudaSuccess;
}
template <class T>
cudaError_t cudaGetSymbolSize(size_t* size, const T&) {
    *size = sizeof(T);
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Internals shared by the header and emu_runtime.cpp.
// ---------------------------------------------------------------------------------------------
namespace emu {

extern uint3 g_thread_idx;
extern uint3 g_block_idx;
extern dim3 g_block_dim;
extern dim3 g_grid_dim;
// Base of the current launch's dynamic shared memory. `extern __shared__ T name[];` is rewritten
// into a reference to this pointer, so it works at namespace scope and inside functions alike.
extern void* g_dyn_smem;

struct LaunchConfig {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
};
inline LaunchConfig launch_config(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0) {
    return LaunchConfig{grid, block, smem, stream};
}

// A kernel launch, type-erased: `invoke(closure)` runs the kernel body for the current thread.
struct KernelBody {
    void (*invoke)(void*);
    void* closure;
};
void run_kernel(const LaunchConfig& config, const char* name, KernelBody body);

// `k<<<cfg>>>(args)` becomes `::emu::launch(::emu::launch_config(cfg), "k", lambda, args)`.
// Arguments are evaluated once, at the launch, and every CUDA thread gets its own copy of the
// kernel parameters when the lambda calls the kernel.
template <class F, class... A>
void launch(const LaunchConfig& config, const char* name, F fn, A&&... args) {
    struct Closure {
        F fn;
        std::tuple<std::decay_t<A>...> args;
    } closure{fn, std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
    KernelBody body{[](void* p) {
                        auto* c = static_cast<Closure*>(p);
                        std::apply(c->fn, c->args);
                    },
                    &closure};
    run_kernel(config, name, body);
}

// Tells the runtime which CUDA version the program was compiled for (registered once, below).
int register_cuda_version(int version);
#ifndef MINISGL_EMU_RUNTIME
inline const int g_registered_cuda_version = register_cuda_version(CUDART_VERSION);
#endif

cudaError_t func_set_attribute(const char* name, cudaFuncAttribute attr, int value);
int func_max_dynamic_smem(const char* name);
template <class F>
cudaError_t func_set_attribute_named(const char* name, F, cudaFuncAttribute attr, int value) {
    return func_set_attribute(name, attr, value);
}

// Collective operations. Each records what the calling CUDA thread offers and suspends it until
// every partner has arrived; the runtime then computes all results at once.
enum class Op : uint8_t {
    ShflIdx, ShflUp, ShflDown, ShflXor, Ballot, Any, All, SyncWarp, MatchAny, MatchAll,
    ReduceAdd, ReduceMinU, ReduceMaxU, ReduceMinS, ReduceMaxS, ReduceAnd, ReduceOr, ReduceXor,
};
struct CollectiveResult {
    uint64_t value;
    int pred;
};
CollectiveResult warp_collective(const char* file, int line, Op op, unsigned mask, uint64_t value,
                                 int arg, int width);
enum BarrierKind { kBarrierPlain = 0, kBarrierCount = 1, kBarrierAnd = 2, kBarrierOr = 3 };
int block_barrier(const char* file, int line, int kind, int pred);
unsigned active_mask(const char* file, int line);
void yield_thread();
long long device_clock();
[[noreturn]] void device_trap(const char* what);

// Types __shfl_*_sync accepts: small integers promote to int, as overload resolution does in CUDA.
template <class T>
using shfl_t = std::conditional_t<(std::is_integral<T>::value || std::is_enum<T>::value) &&
                                      sizeof(T) < sizeof(int),
                                  int, T>;

template <class T>
inline uint64_t to_bits(const T& v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp collectives move values of at most 8 bytes");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    return bits;
}
template <class T>
inline T from_bits(uint64_t bits) {
    T v;
    std::memcpy(&v, &bits, sizeof(T));
    return v;
}
template <class T>
inline shfl_t<T> shfl(const char* file, int line, Op op, unsigned mask, T var, int arg,
                      int width = 32) {
    using U = shfl_t<T>;
    U v = static_cast<U>(var);
    return from_bits<U>(warp_collective(file, line, op, mask, to_bits(v), arg, width).value);
}
template <class T>
inline unsigned match_any(const char* file, int line, unsigned mask, T value) {
    return static_cast<unsigned>(
        warp_collective(file, line, Op::MatchAny, mask, to_bits(value), 0, 32).value);
}
template <class T>
inline unsigned match_all(const char* file, int line, unsigned mask, T value, int* pred) {
    CollectiveResult r = warp_collective(file, line, Op::MatchAll, mask, to_bits(value), 0, 32);
    *pred = r.pred;
    return static_cast<unsigned>(r.value);
}
inline unsigned reduce(const char* file, int line, Op op, unsigned mask, unsigned value) {
    return static_cast<unsigned>(warp_collective(file, line, op, mask, value, 0, 32).value);
}
inline unsigned vote(const char* file, int line, Op op, unsigned mask, int pred) {
    return static_cast<unsigned>(warp_collective(file, line, op, mask, pred != 0, 0, 32).value);
}

}  // namespace emu

// Built-in variables: read-only views of the scheduler's globals.
#define threadIdx (static_cast<const uint3&>(::emu::g_thread_idx))
#define blockIdx (static_cast<const uint3&>(::emu::g_block_idx))
#define blockDim (static_cast<const dim3&>(::emu::g_block_dim))
#define gridDim (static_cast<const dim3&>(::emu::g_grid_dim))
constexpr int warpSize = 32;

// Synchronisation. These are macros so that the runtime learns the source line of every barrier:
// threads of one block that wait at different __syncthreads() calls are reported as divergent.
#define __syncthreads() ::emu::block_barrier(__FILE__, __LINE__, ::emu::kBarrierPlain, 1)
#define __syncthreads_count(p) ::emu::block_barrier(__FILE__, __LINE__, ::emu::kBarrierCount, !!(p))
#define __syncthreads_and(p) ::emu::block_barrier(__FILE__, __LINE__, ::emu::kBarrierAnd, !!(p))
#define __syncthreads_or(p) ::emu::block_barrier(__FILE__, __LINE__, ::emu::kBarrierOr, !!(p))
#define __syncwarp(...) ::emu::emu_syncwarp(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_sync(...) ::emu::shfl(__FILE__, __LINE__, ::emu::Op::ShflIdx, __VA_ARGS__)
#define __shfl_up_sync(...) ::emu::shfl(__FILE__, __LINE__, ::emu::Op::ShflUp, __VA_ARGS__)
#define __shfl_down_sync(...) ::emu::shfl(__FILE__, __LINE__, ::emu::Op::ShflDown, __VA_ARGS__)
#define __shfl_xor_sync(...) ::emu::shfl(__FILE__, __LINE__, ::emu::Op::ShflXor, __VA_ARGS__)
#define __ballot_sync(...) ::emu::vote(__FILE__, __LINE__, ::emu::Op::Ballot, __VA_ARGS__)
#define __any_sync(...) static_cast<int>(::emu::vote(__FILE__, __LINE__, ::emu::Op::Any, __VA_ARGS__))
#define __all_sync(...) static_cast<int>(::emu::vote(__FILE__, __LINE__, ::emu::Op::All, __VA_ARGS__))
#define __activemask() ::emu::active_mask(__FILE__, __LINE__)
#define __match_any_sync(...) ::emu::match_any(__FILE__, __LINE__, __VA_ARGS__)
#define __match_all_sync(...) ::emu::match_all(__FILE__, __LINE__, __VA_ARGS__)
#define __reduce_add_sync(...) ::emu::reduce_sync(__FILE__, __LINE__, ::emu::Op::ReduceAdd, __VA_ARGS__)
#define __reduce_min_sync(...) ::emu::reduce_sync(__FILE__, __LINE__, ::emu::Op::ReduceMinU, __VA_ARGS__)
#define __reduce_max_sync(...) ::emu::reduce_sync(__FILE__, __LINE__, ::emu::Op::ReduceMaxU, __VA_ARGS__)
#define __reduce_and_sync(...) ::emu::reduce_sync(__FILE__, __LINE__, ::emu::Op::ReduceAnd, __VA_ARGS__)
#define __reduce_or_sync(...) ::emu::reduce_sync(__FILE__, __LINE__, ::emu::Op::ReduceOr, __VA_ARGS__)
#define __reduce_xor_sync(...) ::emu::reduce_sync(__FILE__, __LINE__, ::emu::Op::ReduceXor, __VA_ARGS__)

namespace emu {
inline void emu_syncwarp(const char* file, int line, unsigned mask = 0xffffffffu) {
    warp_collective(file, line, Op::SyncWarp, mask, 0, 0, 32);
}
// __reduce_{min,max}_sync compare as signed for int and as unsigned for unsigned.
inline unsigned reduce_sync(const char* file, int line, Op op, unsigned mask, unsigned value) {
    return reduce(file, line, op, mask, value);
}
inline int reduce_sync(const char* file, int line, Op op, unsigned mask, int value) {
    if (op == Op::ReduceMinU) op = Op::ReduceMinS;
    if (op == Op::ReduceMaxU) op = Op::ReduceMaxS;
    return static_cast<int>(reduce(file, line, op, mask, static_cast<unsigned>(value)));
}
}  // namespace emu

// Memory fences: the emulator runs one CUDA thread at a time, so memory is sequentially
// consistent already; a compiler barrier is all that is needed.
inline void __threadfence() { __asm__ __volatile__("" ::: "memory"); }
inline void __threadfence_block() { __asm__ __volatile__("" ::: "memory"); }
inline void __threadfence_system() { __asm__ __volatile__("" ::: "memory"); }
inline void __nanosleep(unsigned int) { ::emu::yield_thread(); }  // lets spin-waiting threads progress
inline long long clock64() { return ::emu::device_clock(); }
inline unsigned long long __globaltimer() { return static_cast<unsigned long long>(::emu::device_clock()); }
inline void __trap() { ::emu::device_trap("__trap()"); }
inline void __brkpt() {}

// Kernel launches through the runtime API (only the typed form can be emulated).
template <class... P>
cudaError_t cudaLaunchKernel(void (*fn)(P...), dim3 grid, dim3 block, void** args, size_t smem = 0,
                             cudaStream_t stream = 0) {
    std::tuple<std::decay_t<P>...> values;
    size_t i = 0;
    std::apply([&](auto&... v) { ((v = *static_cast<std::decay_t<decltype(v)>*>(args[i++])), ...); },
               values);
    std::apply([&](auto&... v) {
        ::emu::launch(::emu::launch_config(grid, block, smem, stream), "cudaLaunchKernel",
                      [fn](auto&&... a) { fn(a...); }, v...);
    }, values);
    return cudaPeekAtLastError();
}

template <class F>
cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) {
    return cudaSuccess;  // normally rewritten to ::emu::func_set_attribute_named
}
template <class F>
cudaError_t cudaFuncSetCacheConfig(F, cudaFuncCache) { return cudaSuccess; }
template <class F>
cudaError_t cudaFuncSetSharedMemConfig(F, cudaSharedMemConfig) { return cudaSuccess; }
template <class F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, F) {
    *attr = cudaFuncAttributes{0, 0, 0, 1024, 32, 90, 90, 0, 49152, -1};
    return cudaSuccess;
}
template <class F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, F, int block_size,
                                                         size_t smem) {
    if (block_size <= 0 || block_size > 1024) return cudaErrorInvalidValue;
    int by_threads = 2048 / block_size;
    int by_smem = smem ? static_cast<int>(233472 / (smem + 1024)) : 32;
    int n = by_threads < by_smem ? by_threads : by_smem;
    *blocks = n < 32 ? n : 32;
    return cudaSuccess;
}
template <class F>
cudaError_t cudaOccupancyMaxPotentialBlockSize(int* min_grid, int* block_size, F, size_t = 0,
                                               int limit = 0) {
    *block_size = (limit > 0 && limit < 1024) ? limit : 1024;
    *min_grid = 132 * (2048 / *block_size);
    return cudaSuccess;
}

#include "emu_device_functions.h"
