// emu_device_functions.h: CUDA's device-side library (math intrinsics, bit tricks, atomics,
// cache-hinted loads) in plain C++. Included by emu_cuda.h.
//
// Fast-math intrinsics such as __expf are computed with the accurate libm functions: results can
// differ from a GPU in the last bits, which is why the conformance programs avoid printing them.
#pragma once

// ---------------------------------------------------------------------------------------------
// min / max: CUDA puts overloads for every arithmetic type in the global namespace.
// ---------------------------------------------------------------------------------------------
#define EMU_MINMAX(T)                                       \
    inline T min(T a, T b) { return b < a ? b : a; }        \
    inline T max(T a, T b) { return a < b ? b : a; }
EMU_MINMAX(int)
EMU_MINMAX(unsigned int)
EMU_MINMAX(long)
EMU_MINMAX(unsigned long)
EMU_MINMAX(long long)
EMU_MINMAX(unsigned long long)
#undef EMU_MINMAX
inline unsigned int min(int a, unsigned int b) { return min(static_cast<unsigned int>(a), b); }
inline unsigned int min(unsigned int a, int b) { return min(a, static_cast<unsigned int>(b)); }
inline unsigned int max(int a, unsigned int b) { return max(static_cast<unsigned int>(a), b); }
inline unsigned int max(unsigned int a, int b) { return max(a, static_cast<unsigned int>(b)); }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline double min(float a, double b) { return std::fmin(static_cast<double>(a), b); }
inline double min(double a, float b) { return std::fmin(a, static_cast<double>(b)); }
inline double max(float a, double b) { return std::fmax(static_cast<double>(a), b); }
inline double max(double a, float b) { return std::fmax(a, static_cast<double>(b)); }

// ---------------------------------------------------------------------------------------------
// Floating point intrinsics.
// ---------------------------------------------------------------------------------------------
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline void __sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fmaf_rn(float x, float y, float z) { return std::fma(x, y, z); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
inline double __dadd_rn(double x, double y) { return x + y; }
inline double __dmul_rn(double x, double y) { return x * y; }
inline double __fma_rn(double x, double y, double z) { return std::fma(x, y, z); }
inline float __saturatef(float x) { return x != x ? 0.0f : (x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x)); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / std::cbrt(x); }
inline float sinpif(float x) { return std::sin(x * 3.14159265358979323846f); }
inline float cospif(float x) { return std::cos(x * 3.14159265358979323846f); }
inline double sinpi(double x) { return std::sin(x * 3.14159265358979323846); }
inline double cospi(double x) { return std::cos(x * 3.14159265358979323846); }
inline float normcdff(float x) { return 0.5f * std::erfc(-x * 0.70710678118654752440f); }
inline float exp10f(float x) { return std::pow(10.0f, x); }

inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline int __float2int_rd(float x) { return static_cast<int>(std::floor(x)); }
inline int __float2int_ru(float x) { return static_cast<int>(std::ceil(x)); }
inline unsigned int __float2uint_rn(float x) { return static_cast<unsigned int>(std::nearbyint(x)); }
inline unsigned int __float2uint_rz(float x) { return static_cast<unsigned int>(x); }
inline long long __float2ll_rn(float x) { return static_cast<long long>(std::nearbyint(x)); }
inline long long __float2ll_rz(float x) { return static_cast<long long>(x); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __uint2float_rn(unsigned int x) { return static_cast<float>(x); }
inline float __ll2float_rn(long long x) { return static_cast<float>(x); }
inline float __double2float_rn(double x) { return static_cast<float>(x); }
inline int __double2int_rn(double x) { return static_cast<int>(std::nearbyint(x)); }
inline int __double2int_rz(double x) { return static_cast<int>(x); }

inline int __float_as_int(float x) { int r; std::memcpy(&r, &x, 4); return r; }
inline unsigned int __float_as_uint(float x) { unsigned int r; std::memcpy(&r, &x, 4); return r; }
inline float __int_as_float(int x) { float r; std::memcpy(&r, &x, 4); return r; }
inline float __uint_as_float(unsigned int x) { float r; std::memcpy(&r, &x, 4); return r; }
inline long long __double_as_longlong(double x) { long long r; std::memcpy(&r, &x, 8); return r; }
inline double __longlong_as_double(long long x) { double r; std::memcpy(&r, &x, 8); return r; }
inline int __double2hiint(double x) { return static_cast<int>(__double_as_longlong(x) >> 32); }
inline int __double2loint(double x) { return static_cast<int>(__double_as_longlong(x)); }
inline double __hiloint2double(int hi, int lo) {
    return __longlong_as_double(static_cast<long long>(
        (static_cast<unsigned long long>(static_cast<unsigned int>(hi)) << 32) |
        static_cast<unsigned int>(lo)));
}

// ---------------------------------------------------------------------------------------------
// Integer intrinsics.
// ---------------------------------------------------------------------------------------------
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned int>(x)); }
inline int __clzll(long long x) {
    return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
    unsigned int r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline unsigned long long __brevll(unsigned long long x) {
    return (static_cast<unsigned long long>(__brev(static_cast<unsigned int>(x))) << 32) |
           __brev(static_cast<unsigned int>(x >> 32));
}
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    unsigned long long bytes = (static_cast<unsigned long long>(y) << 32) | x;
    unsigned int r = 0;
    for (int i = 0; i < 4; ++i) {
        unsigned int sel = (s >> (4 * i)) & 7u;
        r |= static_cast<unsigned int>((bytes >> (8 * sel)) & 0xffu) << (8 * i);
    }
    return r;
}
inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int shift) {
    unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
    return static_cast<unsigned int>((v << (shift & 31)) >> 32);
}
inline unsigned int __funnelshift_lc(unsigned int lo, unsigned int hi, unsigned int shift) {
    unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
    return static_cast<unsigned int>((v << (shift > 32 ? 32 : shift)) >> 32);
}
inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift) {
    unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
    return static_cast<unsigned int>(v >> (shift & 31));
}
inline unsigned int __funnelshift_rc(unsigned int lo, unsigned int hi, unsigned int shift) {
    unsigned long long v = (static_cast<unsigned long long>(hi) << 32) | lo;
    return static_cast<unsigned int>(v >> (shift > 32 ? 32 : shift));
}
inline int __mul24(int x, int y) {
    return static_cast<int>((static_cast<long long>(x << 8 >> 8) * (y << 8 >> 8)));
}
inline unsigned int __umul24(unsigned int x, unsigned int y) { return (x & 0xffffffu) * (y & 0xffffffu); }
inline int __mulhi(int x, int y) { return static_cast<int>((static_cast<long long>(x) * y) >> 32); }
inline unsigned int __umulhi(unsigned int x, unsigned int y) {
    return static_cast<unsigned int>((static_cast<unsigned long long>(x) * y) >> 32);
}
inline long long __mul64hi(long long x, long long y) {
    return static_cast<long long>((static_cast<__int128>(x) * y) >> 64);
}
inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
    return static_cast<unsigned long long>((static_cast<unsigned __int128>(x) * y) >> 64);
}
inline int __hadd(int x, int y) { return static_cast<int>((static_cast<long long>(x) + y) >> 1); }
inline int __rhadd(int x, int y) { return static_cast<int>((static_cast<long long>(x) + y + 1) >> 1); }
inline unsigned int __uhadd(unsigned int x, unsigned int y) {
    return static_cast<unsigned int>((static_cast<unsigned long long>(x) + y) >> 1);
}
inline unsigned int __urhadd(unsigned int x, unsigned int y) {
    return static_cast<unsigned int>((static_cast<unsigned long long>(x) + y + 1) >> 1);
}
inline unsigned int __sad(int x, int y, unsigned int z) {
    return z + static_cast<unsigned int>(x > y ? static_cast<long long>(x) - y : static_cast<long long>(y) - x);
}
inline unsigned int __usad(unsigned int x, unsigned int y, unsigned int z) {
    return z + (x > y ? x - y : y - x);
}
inline int __dp4a(int a, int b, int c) {
    int r = c;
    for (int i = 0; i < 4; ++i)
        r += static_cast<signed char>(a >> (8 * i)) * static_cast<signed char>(b >> (8 * i));
    return r;
}
inline unsigned int __dp4a(unsigned int a, unsigned int b, unsigned int c) {
    unsigned int r = c;
    for (int i = 0; i < 4; ++i) r += ((a >> (8 * i)) & 0xffu) * ((b >> (8 * i)) & 0xffu);
    return r;
}

// ---------------------------------------------------------------------------------------------
// Cache-hinted loads and stores are plain accesses.
// ---------------------------------------------------------------------------------------------
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// ---------------------------------------------------------------------------------------------
// Atomics. Only one CUDA thread runs at any moment and a thread is never suspended inside an
// atomic, so a plain read-modify-write is atomic. Integer arithmetic wraps as on the GPU.
// ---------------------------------------------------------------------------------------------
inline int atomicAdd(int* a, int v) {
    int old = *a;
    *a = static_cast<int>(static_cast<unsigned int>(old) + static_cast<unsigned int>(v));
    return old;
}
inline unsigned int atomicAdd(unsigned int* a, unsigned int v) { unsigned int o = *a; *a = o + v; return o; }
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
    unsigned long long o = *a;
    *a = o + v;
    return o;
}
inline float atomicAdd(float* a, float v) { float o = *a; *a = o + v; return o; }
inline double atomicAdd(double* a, double v) { double o = *a; *a = o + v; return o; }
inline float2 atomicAdd(float2* a, float2 v) {
    float2 o = *a;
    *a = float2{o.x + v.x, o.y + v.y};
    return o;
}
inline float4 atomicAdd(float4* a, float4 v) {
    float4 o = *a;
    *a = float4{o.x + v.x, o.y + v.y, o.z + v.z, o.w + v.w};
    return o;
}
inline int atomicSub(int* a, int v) {
    int old = *a;
    *a = static_cast<int>(static_cast<unsigned int>(old) - static_cast<unsigned int>(v));
    return old;
}
inline unsigned int atomicSub(unsigned int* a, unsigned int v) { unsigned int o = *a; *a = o - v; return o; }

template <class T>
inline T emu_exchange(T* a, T v) {
    T o = *a;
    *a = v;
    return o;
}
inline int atomicExch(int* a, int v) { return emu_exchange(a, v); }
inline unsigned int atomicExch(unsigned int* a, unsigned int v) { return emu_exchange(a, v); }
inline unsigned long long atomicExch(unsigned long long* a, unsigned long long v) { return emu_exchange(a, v); }
inline float atomicExch(float* a, float v) { return emu_exchange(a, v); }

template <class T>
inline T emu_fetch_min(T* a, T v) {
    T o = *a;
    if (v < o) *a = v;
    return o;
}
template <class T>
inline T emu_fetch_max(T* a, T v) {
    T o = *a;
    if (o < v) *a = v;
    return o;
}
inline int atomicMin(int* a, int v) { return emu_fetch_min(a, v); }
inline unsigned int atomicMin(unsigned int* a, unsigned int v) { return emu_fetch_min(a, v); }
inline unsigned long long atomicMin(unsigned long long* a, unsigned long long v) { return emu_fetch_min(a, v); }
inline long long atomicMin(long long* a, long long v) { return emu_fetch_min(a, v); }
inline int atomicMax(int* a, int v) { return emu_fetch_max(a, v); }
inline unsigned int atomicMax(unsigned int* a, unsigned int v) { return emu_fetch_max(a, v); }
inline unsigned long long atomicMax(unsigned long long* a, unsigned long long v) { return emu_fetch_max(a, v); }
inline long long atomicMax(long long* a, long long v) { return emu_fetch_max(a, v); }

// atomicInc counts up to `limit` and wraps to 0; atomicDec counts down and wraps to `limit`.
inline unsigned int atomicInc(unsigned int* a, unsigned int limit) {
    unsigned int o = *a;
    *a = (o >= limit) ? 0u : o + 1u;
    return o;
}
inline unsigned int atomicDec(unsigned int* a, unsigned int limit) {
    unsigned int o = *a;
    *a = (o == 0u || o > limit) ? limit : o - 1u;
    return o;
}

template <class T>
inline T emu_compare_swap(T* a, T compare, T v) {
    T o = *a;
    if (o == compare) *a = v;
    return o;
}
inline int atomicCAS(int* a, int c, int v) { return emu_compare_swap(a, c, v); }
inline unsigned int atomicCAS(unsigned int* a, unsigned int c, unsigned int v) { return emu_compare_swap(a, c, v); }
inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long c, unsigned long long v) {
    return emu_compare_swap(a, c, v);
}
inline unsigned short atomicCAS(unsigned short* a, unsigned short c, unsigned short v) {
    return emu_compare_swap(a, c, v);
}

#define EMU_BITWISE_ATOMIC(NAME, OP)                                                          \
    inline int NAME(int* a, int v) { int o = *a; *a = o OP v; return o; }                     \
    inline unsigned int NAME(unsigned int* a, unsigned int v) {                               \
        unsigned int o = *a; *a = o OP v; return o;                                           \
    }                                                                                         \
    inline unsigned long long NAME(unsigned long long* a, unsigned long long v) {             \
        unsigned long long o = *a; *a = o OP v; return o;                                     \
    }
EMU_BITWISE_ATOMIC(atomicAnd, &)
EMU_BITWISE_ATOMIC(atomicOr, |)
EMU_BITWISE_ATOMIC(atomicXor, ^)
#undef EMU_BITWISE_ATOMIC

// The _block and _system scoped variants behave like the device-wide ones here.
#define EMU_SCOPED_ATOMIC(NAME)                                                               \
    template <class... A>                                                                     \
    inline auto NAME##_block(A... a) -> decltype(NAME(a...)) { return NAME(a...); }           \
    template <class... A>                                                                     \
    inline auto NAME##_system(A... a) -> decltype(NAME(a...)) { return NAME(a...); }
EMU_SCOPED_ATOMIC(atomicAdd)
EMU_SCOPED_ATOMIC(atomicSub)
EMU_SCOPED_ATOMIC(atomicExch)
EMU_SCOPED_ATOMIC(atomicMin)
EMU_SCOPED_ATOMIC(atomicMax)
EMU_SCOPED_ATOMIC(atomicInc)
EMU_SCOPED_ATOMIC(atomicDec)
EMU_SCOPED_ATOMIC(atomicCAS)
EMU_SCOPED_ATOMIC(atomicAnd)
EMU_SCOPED_ATOMIC(atomicOr)
EMU_SCOPED_ATOMIC(atomicXor)
#undef EMU_SCOPED_ATOMIC
