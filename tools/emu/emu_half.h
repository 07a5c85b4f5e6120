// emu_half.h: __half, __half2, __nv_bfloat16 and __nv_bfloat162 for the CPU emulator.
//
// Values are stored as their 16-bit patterns; every conversion rounds exactly as the GPU does
// (round-to-nearest-even unless the name says _rz/_rd/_ru, subnormals kept, NaN -> 0x7fff).
// Arithmetic goes through float: for +, -, *, / and sqrt the float result rounded once more to
// 16 bits is exactly the correctly rounded 16-bit result, because float carries more than twice
// as many mantissa bits plus two (24 >= 2*11+2 for half, 24 >= 2*8+2 for bfloat16).
#pragma once
#include "emu_cuda.h"

namespace emu {

enum Rounding { kNearest = 0, kTowardZero = 1, kDown = 2, kUp = 3 };

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// Adds one unit in the last place when the discarded fraction `rest` (a 32-bit fixed point
// fraction of one unit, 0x80000000 = one half) asks for it under the rounding mode.
inline uint32_t round_up_by(uint32_t kept, uint32_t rest, bool negative, int mode) {
    switch (mode) {
    case kNearest: return kept + ((rest > 0x80000000u || (rest == 0x80000000u && (kept & 1u))) ? 1u : 0u);
    case kTowardZero: return kept;
    case kDown: return kept + ((rest && negative) ? 1u : 0u);
    default: return kept + ((rest && !negative) ? 1u : 0u);
    }
}

inline unsigned short float_to_half_bits(float f, int mode) {
    uint32_t x = float_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t u = x & 0x7fffffffu;
    if (u > 0x7f800000u) return 0x7fffu;           // NaN: the canonical half NaN
    if (u == 0x7f800000u) return static_cast<unsigned short>(sign | 0x7c00u);
    uint32_t kept, rest;
    if (u >= 0x47800000u) {                         // >= 2^16: beyond the largest finite half
        kept = 0x7bffu;
        rest = 0xffffffffu;
    } else if (u >= 0x38800000u) {                  // a normal half
        kept = ((u >> 23) - 112u) << 10 | ((u >> 13) & 0x3ffu);
        rest = u << 19;
    } else if (u >= 0x00800000u) {                  // a subnormal half (or zero)
        uint32_t mant = (u & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - (u >> 23);          // 14 .. 125
        if (shift > 32u) {
            kept = 0;
            rest = 1;                               // far below half an ulp, but not zero
        } else {
            kept = mant >> shift;
            rest = shift == 32u ? mant : mant << (32u - shift);
        }
    } else {                                        // zero or a float subnormal
        kept = 0;
        rest = u ? 1u : 0u;
    }
    return static_cast<unsigned short>(sign | round_up_by(kept, rest, sign != 0, mode));
}

inline float half_bits_to_float(unsigned short h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1fu) return bits_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        float v = static_cast<float>(m) * 5.9604644775390625e-08f;  // m * 2^-24, exact
        return sign ? -v : v;
    }
    return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

inline unsigned short float_to_bf16_bits(float f, int mode) {
    uint32_t x = float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    return static_cast<unsigned short>(round_up_by(x >> 16, x << 16, (x >> 31) != 0, mode));
}

inline float bf16_bits_to_float(unsigned short b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Rounds a double to float "to odd": an inexact result keeps its last bit set, which makes a
// second rounding (to half or bfloat16) give the same answer as rounding the double directly.
inline float double_to_float_odd(double d) {
    float f = static_cast<float>(d);
    if (static_cast<double>(f) == d || d != d) return f;
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    return bits_float(float_bits(f) | 1u);
}

}  // namespace emu

struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };
struct __nv_bfloat16_raw { unsigned short x; };
struct __nv_bfloat162_raw { unsigned short x, y; };

struct alignas(2) __half {
    unsigned short __x;
    __half() = default;
    constexpr __half(const __half_raw& r) : __x(r.x) {}
    __half(float f) : __x(::emu::float_to_half_bits(f, ::emu::kNearest)) {}
    __half(double d) : __x(::emu::float_to_half_bits(::emu::double_to_float_odd(d), ::emu::kNearest)) {}
    __half(int v) : __half(static_cast<double>(v)) {}
    __half(unsigned int v) : __half(static_cast<double>(v)) {}
    __half(short v) : __half(static_cast<float>(v)) {}
    __half(unsigned short v) : __half(static_cast<float>(v)) {}
    __half(long long v) : __half(static_cast<double>(v)) {}
    __half(unsigned long long v) : __half(static_cast<double>(v)) {}
    operator float() const { return ::emu::half_bits_to_float(__x); }
    operator __half_raw() const { return __half_raw{__x}; }
};

struct alignas(2) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    constexpr __nv_bfloat16(const __nv_bfloat16_raw& r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(::emu::float_to_bf16_bits(f, ::emu::kNearest)) {}
    __nv_bfloat16(double d)
        : __x(::emu::float_to_bf16_bits(::emu::double_to_float_odd(d), ::emu::kNearest)) {}
    __nv_bfloat16(int v) : __nv_bfloat16(static_cast<double>(v)) {}
    __nv_bfloat16(unsigned int v) : __nv_bfloat16(static_cast<double>(v)) {}
    __nv_bfloat16(short v) : __nv_bfloat16(static_cast<float>(v)) {}
    __nv_bfloat16(unsigned short v) : __nv_bfloat16(static_cast<float>(v)) {}
    __nv_bfloat16(long long v) : __nv_bfloat16(static_cast<double>(v)) {}
    __nv_bfloat16(unsigned long long v) : __nv_bfloat16(static_cast<double>(v)) {}
    operator float() const { return ::emu::bf16_bits_to_float(__x); }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
};

struct alignas(4) __half2 {
    __half x, y;
    __half2() = default;
    constexpr __half2(const __half& a, const __half& b) : x(a), y(b) {}
    __half2(const __half2_raw& r) : x(__half_raw{r.x}), y(__half_raw{r.y}) {}
    operator __half2_raw() const { return __half2_raw{x.__x, y.__x}; }
};

struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    constexpr __nv_bfloat162(const __nv_bfloat16& a, const __nv_bfloat16& b) : x(a), y(b) {}
    __nv_bfloat162(const __nv_bfloat162_raw& r)
        : x(__nv_bfloat16_raw{r.x}), y(__nv_bfloat16_raw{r.y}) {}
    operator __nv_bfloat162_raw() const { return __nv_bfloat162_raw{x.__x, y.__x}; }
};

typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

// ---------------------------------------------------------------------------------------------
// Conversions.
// ---------------------------------------------------------------------------------------------
inline __half emu_make_half(unsigned short bits) { return __half(__half_raw{bits}); }
inline __nv_bfloat16 emu_make_bf16(unsigned short bits) { return __nv_bfloat16(__nv_bfloat16_raw{bits}); }

inline __half __float2half(float f) { return emu_make_half(::emu::float_to_half_bits(f, ::emu::kNearest)); }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline __half __float2half_rz(float f) { return emu_make_half(::emu::float_to_half_bits(f, ::emu::kTowardZero)); }
inline __half __float2half_rd(float f) { return emu_make_half(::emu::float_to_half_bits(f, ::emu::kDown)); }
inline __half __float2half_ru(float f) { return emu_make_half(::emu::float_to_half_bits(f, ::emu::kUp)); }
inline __half __double2half(double d) { return __half(d); }
inline float __half2float(__half h) { return ::emu::half_bits_to_float(h.__x); }
inline __half __int2half_rn(int v) { return __half(static_cast<double>(v)); }
inline __half __uint2half_rn(unsigned int v) { return __half(static_cast<double>(v)); }
inline __half __short2half_rn(short v) { return __half(static_cast<float>(v)); }
inline __half __ushort2half_rn(unsigned short v) { return __half(static_cast<float>(v)); }
inline __half __ll2half_rn(long long v) { return __half(static_cast<double>(v)); }
inline int __half2int_rn(__half h) { return static_cast<int>(std::nearbyint(__half2float(h))); }
inline int __half2int_rz(__half h) { return static_cast<int>(__half2float(h)); }
inline int __half2int_rd(__half h) { return static_cast<int>(std::floor(__half2float(h))); }
inline int __half2int_ru(__half h) { return static_cast<int>(std::ceil(__half2float(h))); }
inline unsigned int __half2uint_rn(__half h) { return static_cast<unsigned int>(std::nearbyint(__half2float(h))); }
inline unsigned int __half2uint_rz(__half h) { return static_cast<unsigned int>(__half2float(h)); }
inline short __half2short_rz(__half h) { return static_cast<short>(__half2float(h)); }
inline long long __half2ll_rz(__half h) { return static_cast<long long>(__half2float(h)); }
inline short __half_as_short(__half h) { return static_cast<short>(h.__x); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __short_as_half(short s) { return emu_make_half(static_cast<unsigned short>(s)); }
inline __half __ushort_as_half(unsigned short s) { return emu_make_half(s); }

inline __half2 __float2half2_rn(float f) { return __half2(__float2half(f), __float2half(f)); }
inline __half2 __floats2half2_rn(float a, float b) { return __half2(__float2half(a), __float2half(b)); }
inline __half2 __float22half2_rn(float2 v) { return __floats2half2_rn(v.x, v.y); }
inline float2 __half22float2(__half2 h) { return float2{__half2float(h.x), __half2float(h.y)}; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
inline __half2 __half2half2(__half a) { return __half2(a, a); }
inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }
inline __half2 __lowhigh2highlow(__half2 a) { return __half2(a.y, a.x); }

inline __nv_bfloat16 __float2bfloat16(float f) { return emu_make_bf16(::emu::float_to_bf16_bits(f, ::emu::kNearest)); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rz(float f) { return emu_make_bf16(::emu::float_to_bf16_bits(f, ::emu::kTowardZero)); }
inline __nv_bfloat16 __float2bfloat16_rd(float f) { return emu_make_bf16(::emu::float_to_bf16_bits(f, ::emu::kDown)); }
inline __nv_bfloat16 __float2bfloat16_ru(float f) { return emu_make_bf16(::emu::float_to_bf16_bits(f, ::emu::kUp)); }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(d); }
inline float __bfloat162float(__nv_bfloat16 b) { return ::emu::bf16_bits_to_float(b.__x); }
inline __nv_bfloat16 __int2bfloat16_rn(int v) { return __nv_bfloat16(static_cast<double>(v)); }
inline int __bfloat162int_rn(__nv_bfloat16 b) { return static_cast<int>(std::nearbyint(__bfloat162float(b))); }
inline int __bfloat162int_rz(__nv_bfloat16 b) { return static_cast<int>(__bfloat162float(b)); }
inline short __bfloat16_as_short(__nv_bfloat16 b) { return static_cast<short>(b.__x); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline __nv_bfloat16 __short_as_bfloat16(short s) { return emu_make_bf16(static_cast<unsigned short>(s)); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { return emu_make_bf16(s); }

inline __nv_bfloat162 __float2bfloat162_rn(float f) { return __nv_bfloat162(__float2bfloat16(f), __float2bfloat16(f)); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return __nv_bfloat162(__float2bfloat16(a), __float2bfloat16(b));
}
inline __nv_bfloat162 __float22bfloat162_rn(float2 v) { return __floats2bfloat162_rn(v.x, v.y); }
inline float2 __bfloat1622float2(__nv_bfloat162 b) {
    return float2{__bfloat162float(b.x), __bfloat162float(b.y)};
}
inline float __low2float(__nv_bfloat162 b) { return __bfloat162float(b.x); }
inline float __high2float(__nv_bfloat162 b) { return __bfloat162float(b.y); }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 b) { return b.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 b) { return b.y; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162(a, a); }

// ---------------------------------------------------------------------------------------------
// Arithmetic, comparisons and math, for both 16-bit types.
// ---------------------------------------------------------------------------------------------
#define EMU_HALF_ARITHMETIC(H, H2, TO_F, FROM_F)                                                     \
    inline H __hadd(H a, H b) { return FROM_F(TO_F(a) + TO_F(b)); }                                 \
    inline H __hsub(H a, H b) { return FROM_F(TO_F(a) - TO_F(b)); }                                 \
    inline H __hmul(H a, H b) { return FROM_F(TO_F(a) * TO_F(b)); }                                 \
    inline H __hdiv(H a, H b) { return FROM_F(TO_F(a) / TO_F(b)); }                                 \
    inline H __hadd_rn(H a, H b) { return __hadd(a, b); }                                           \
    inline H __hsub_rn(H a, H b) { return __hsub(a, b); }                                           \
    inline H __hmul_rn(H a, H b) { return __hmul(a, b); }                                           \
    inline H __hfma(H a, H b, H c) {                                                                \
        return H(std::fma(static_cast<double>(TO_F(a)), static_cast<double>(TO_F(b)),               \
                          static_cast<double>(TO_F(c))));                                           \
    }                                                                                               \
    inline H emu_saturate(H a) {                                                                    \
        float f = TO_F(a);                                                                          \
        return FROM_F(f != f ? 0.0f : (f < 0.0f ? 0.0f : (f > 1.0f ? 1.0f : f)));                   \
    }                                                                                               \
    inline H __hadd_sat(H a, H b) { return emu_saturate(__hadd(a, b)); }                            \
    inline H __hsub_sat(H a, H b) { return emu_saturate(__hsub(a, b)); }                            \
    inline H __hmul_sat(H a, H b) { return emu_saturate(__hmul(a, b)); }                            \
    inline H __hfma_sat(H a, H b, H c) { return emu_saturate(__hfma(a, b, c)); }                    \
    inline H __hneg(H a) { H r = a; r.__x ^= 0x8000u; return r; }                                   \
    inline H __habs(H a) { H r = a; r.__x &= 0x7fffu; return r; }                                   \
    inline bool __hisnan(H a) { return TO_F(a) != TO_F(a); }                                        \
    inline int __hisinf(H a) { float f = TO_F(a); return std::isinf(f) ? (f < 0 ? -1 : 1) : 0; }   \
    inline bool __heq(H a, H b) { return TO_F(a) == TO_F(b); }                                      \
    inline bool __hne(H a, H b) { return TO_F(a) < TO_F(b) || TO_F(a) > TO_F(b); }                  \
    inline bool __hlt(H a, H b) { return TO_F(a) < TO_F(b); }                                       \
    inline bool __hle(H a, H b) { return TO_F(a) <= TO_F(b); }                                      \
    inline bool __hgt(H a, H b) { return TO_F(a) > TO_F(b); }                                       \
    inline bool __hge(H a, H b) { return TO_F(a) >= TO_F(b); }                                      \
    inline H __hmax(H a, H b) { return FROM_F(std::fmax(TO_F(a), TO_F(b))); }                       \
    inline H __hmin(H a, H b) { return FROM_F(std::fmin(TO_F(a), TO_F(b))); }                       \
    inline H __hmax_nan(H a, H b) { return (__hisnan(a) || __hisnan(b)) ? emu_nan(a) : __hmax(a, b); } \
    inline H __hmin_nan(H a, H b) { return (__hisnan(a) || __hisnan(b)) ? emu_nan(a) : __hmin(a, b); } \
    inline H hsqrt(H a) { return FROM_F(std::sqrt(TO_F(a))); }                                      \
    inline H hrsqrt(H a) { return FROM_F(1.0f / std::sqrt(TO_F(a))); }                              \
    inline H hrcp(H a) { return FROM_F(1.0f / TO_F(a)); }                                           \
    inline H hexp(H a) { return FROM_F(std::exp(TO_F(a))); }                                        \
    inline H hexp2(H a) { return FROM_F(std::exp2(TO_F(a))); }                                      \
    inline H hlog(H a) { return FROM_F(std::log(TO_F(a))); }                                        \
    inline H hlog2(H a) { return FROM_F(std::log2(TO_F(a))); }                                      \
    inline H hsin(H a) { return FROM_F(std::sin(TO_F(a))); }                                        \
    inline H hcos(H a) { return FROM_F(std::cos(TO_F(a))); }                                        \
    inline H htrunc(H a) { return FROM_F(std::trunc(TO_F(a))); }                                    \
    inline H hceil(H a) { return FROM_F(std::ceil(TO_F(a))); }                                      \
    inline H hfloor(H a) { return FROM_F(std::floor(TO_F(a))); }                                    \
    inline H hrint(H a) { return FROM_F(std::nearbyint(TO_F(a))); }                                 \
    inline H operator+(const H& a, const H& b) { return __hadd(a, b); }                             \
    inline H operator-(const H& a, const H& b) { return __hsub(a, b); }                             \
    inline H operator*(const H& a, const H& b) { return __hmul(a, b); }                             \
    inline H operator/(const H& a, const H& b) { return __hdiv(a, b); }                             \
    inline H& operator+=(H& a, const H& b) { return a = __hadd(a, b); }                             \
    inline H& operator-=(H& a, const H& b) { return a = __hsub(a, b); }                             \
    inline H& operator*=(H& a, const H& b) { return a = __hmul(a, b); }                             \
    inline H& operator/=(H& a, const H& b) { return a = __hdiv(a, b); }                             \
    inline H operator+(const H& a) { return a; }                                                    \
    inline H operator-(const H& a) { return __hneg(a); }                                            \
    inline bool operator==(const H& a, const H& b) { return __heq(a, b); }                          \
    inline bool operator!=(const H& a, const H& b) { return !__heq(a, b); }                         \
    inline bool operator<(const H& a, const H& b) { return __hlt(a, b); }                           \
    inline bool operator<=(const H& a, const H& b) { return __hle(a, b); }                          \
    inline bool operator>(const H& a, const H& b) { return __hgt(a, b); }                           \
    inline bool operator>=(const H& a, const H& b) { return __hge(a, b); }                          \
    inline H2 __hadd2(H2 a, H2 b) { return H2(__hadd(a.x, b.x), __hadd(a.y, b.y)); }                \
    inline H2 __hsub2(H2 a, H2 b) { return H2(__hsub(a.x, b.x), __hsub(a.y, b.y)); }                \
    inline H2 __hmul2(H2 a, H2 b) { return H2(__hmul(a.x, b.x), __hmul(a.y, b.y)); }                \
    inline H2 __h2div(H2 a, H2 b) { return H2(__hdiv(a.x, b.x), __hdiv(a.y, b.y)); }                \
    inline H2 __hfma2(H2 a, H2 b, H2 c) { return H2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); } \
    inline H2 __hneg2(H2 a) { return H2(__hneg(a.x), __hneg(a.y)); }                                \
    inline H2 __habs2(H2 a) { return H2(__habs(a.x), __habs(a.y)); }                                \
    inline H2 __hmax2(H2 a, H2 b) { return H2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }                \
    inline H2 __hmin2(H2 a, H2 b) { return H2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }                \
    inline H2 operator+(const H2& a, const H2& b) { return __hadd2(a, b); }                         \
    inline H2 operator-(const H2& a, const H2& b) { return __hsub2(a, b); }                         \
    inline H2 operator*(const H2& a, const H2& b) { return __hmul2(a, b); }                         \
    inline H2 operator/(const H2& a, const H2& b) { return __h2div(a, b); }                         \
    inline H2& operator+=(H2& a, const H2& b) { return a = __hadd2(a, b); }                         \
    inline H2& operator*=(H2& a, const H2& b) { return a = __hmul2(a, b); }                         \
    inline H atomicAdd(H* p, H v) { H o = *p; *p = __hadd(o, v); return o; }                        \
    inline H2 atomicAdd(H2* p, H2 v) { H2 o = *p; *p = __hadd2(o, v); return o; }

inline __half emu_nan(__half) { return emu_make_half(0x7fffu); }
inline __nv_bfloat16 emu_nan(__nv_bfloat16) { return emu_make_bf16(0x7fffu); }
EMU_HALF_ARITHMETIC(__half, __half2, __half2float, __float2half)
EMU_HALF_ARITHMETIC(__nv_bfloat16, __nv_bfloat162, __bfloat162float, __float2bfloat16)
#undef EMU_HALF_ARITHMETIC

inline __half2 h2sqrt(__half2 a) { return __half2(hsqrt(a.x), hsqrt(a.y)); }
inline __half2 h2exp(__half2 a) { return __half2(hexp(a.x), hexp(a.y)); }
inline __nv_bfloat162 h2sqrt(__nv_bfloat162 a) { return __nv_bfloat162(hsqrt(a.x), hsqrt(a.y)); }
inline __nv_bfloat162 h2exp(__nv_bfloat162 a) { return __nv_bfloat162(hexp(a.x), hexp(a.y)); }
