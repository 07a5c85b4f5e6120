// __half and __nv_bfloat16: float -> 16-bit conversions in all four rounding modes (ties,
// subnormals, overflow, infinities, NaN), conversions back, double and integer conversions, the
// basic arithmetic (a fused multiply-add rounds once), half2/bfloat162 pairs, 16-bit shuffles and
// atomics. The CPU reference rounds by searching all 65536 bit patterns for the right neighbour.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "check.cuh"

constexpr int NIN = 32;
enum { RN, RZ, RD, RU };

__global__ void convert(const float* in, unsigned short* h, unsigned short* b, unsigned* back) {
    int i = threadIdx.x;
    float x = in[i];
    h[4 * i + 0] = __half_as_ushort(__float2half_rn(x));
    h[4 * i + 1] = __half_as_ushort(__float2half_rz(x));
    h[4 * i + 2] = __half_as_ushort(__float2half_rd(x));
    h[4 * i + 3] = __half_as_ushort(__float2half_ru(x));
    b[4 * i + 0] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
    b[4 * i + 1] = __bfloat16_as_ushort(__float2bfloat16_rz(x));
    b[4 * i + 2] = __bfloat16_as_ushort(__float2bfloat16_rd(x));
    b[4 * i + 3] = __bfloat16_as_ushort(__float2bfloat16_ru(x));
    back[2 * i + 0] = __float_as_uint(__half2float(__float2half(x)));
    back[2 * i + 1] = __float_as_uint(__bfloat162float(__float2bfloat16(x)));
}

// out: for each (a, b, c): add, sub, mul, fma, max, min, as 16-bit patterns.
__global__ void arithmetic(const unsigned short* hin, const unsigned short* bin, unsigned short* hout,
                           unsigned short* bout) {
    int i = threadIdx.x;
    __half ha = __ushort_as_half(hin[3 * i]), hb = __ushort_as_half(hin[3 * i + 1]), hc = __ushort_as_half(hin[3 * i + 2]);
    hout[6 * i + 0] = __half_as_ushort(__hadd(ha, hb));
    hout[6 * i + 1] = __half_as_ushort(__hsub(ha, hb));
    hout[6 * i + 2] = __half_as_ushort(__hmul(ha, hb));
    hout[6 * i + 3] = __half_as_ushort(__hfma(ha, hb, hc));
    hout[6 * i + 4] = __half_as_ushort(__hmax(ha, hb));
    hout[6 * i + 5] = __half_as_ushort(__hmin(ha, hb));
    __nv_bfloat16 ba = __ushort_as_bfloat16(bin[3 * i]), bb = __ushort_as_bfloat16(bin[3 * i + 1]),
                  bc = __ushort_as_bfloat16(bin[3 * i + 2]);
    bout[6 * i + 0] = __bfloat16_as_ushort(__hadd(ba, bb));
    bout[6 * i + 1] = __bfloat16_as_ushort(__hsub(ba, bb));
    bout[6 * i + 2] = __bfloat16_as_ushort(__hmul(ba, bb));
    bout[6 * i + 3] = __bfloat16_as_ushort(__hfma(ba, bb, bc));
    bout[6 * i + 4] = __bfloat16_as_ushort(__hmax(ba, bb));
    bout[6 * i + 5] = __bfloat16_as_ushort(__hmin(ba, bb));
}

// Integer and double conversions, pairs, a warp shuffle of __half2 and 16-bit atomics.
__global__ void misc(int* ints, unsigned short* bits, float* floats, __half* hsum, __nv_bfloat16* bsum, __half2* h2sum) {
    int lane = threadIdx.x;
    if (lane == 0) {
        ints[0] = __half2int_rz(__float2half(-7.75f));
        ints[1] = __half2int_rn(__float2half(2.5f));
        ints[2] = __half2int_rn(__float2half(3.5f));
        ints[3] = __bfloat162int_rz(__float2bfloat16(-123.9f));
        bits[0] = __half_as_ushort(__int2half_rn(2049));
        bits[1] = __half_as_ushort(__int2half_rn(65519));
        bits[2] = __half_as_ushort(__int2half_rn(65520));
        bits[3] = __half_as_ushort(__double2half(1.0 + 1.0 / 2048 + 1.0 / (1LL << 40)));  // rounds once: up
        bits[4] = __bfloat16_as_ushort(__double2bfloat16(1.0 + 1.0 / 256 + 1.0 / (1LL << 40)));
        __half2 p = __floats2half2_rn(0.1f, -0.2f);
        __half2 q = __hmul2(__hadd2(p, p), __floats2half2_rn(3.0f, 0.5f));
        bits[5] = __half_as_ushort(__low2half(q));
        bits[6] = __half_as_ushort(__high2half(q));
        __nv_bfloat162 r = __floats2bfloat162_rn(0.1f, -0.2f);
        __nv_bfloat162 s = __hmul2(__hadd2(r, r), __floats2bfloat162_rn(3.0f, 0.5f));
        floats[0] = __low2float(q);
        floats[1] = __high2float(q);
        floats[2] = __low2float(s);
        floats[3] = __high2float(s);
    }
    __half h = __float2half(0.25f * lane);  // exact
    for (int m = 16; m > 0; m /= 2) h = __hadd(h, __shfl_xor_sync(0xffffffffu, h, m));
    if (lane == 0) floats[4] = __half2float(h);  // 0.25 * 496 = 124
    atomicAdd(hsum, __float2half(0.5f));
    atomicAdd(bsum, __float2bfloat16(0.25f));
    atomicAdd(h2sum, __floats2half2_rn(1.0f, -0.125f));
}

// ---- CPU reference -----------------------------------------------------------------------------
static double decode(unsigned bits, bool bf16) {
    if (bf16) {
        unsigned u = bits << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    unsigned e = (bits >> 10) & 0x1f, m = bits & 0x3ff;
    double mag = e == 0 ? ldexp(m, -24) : ldexp(1024.0 + m, static_cast<int>(e) - 25);
    return (bits & 0x8000) ? -mag : mag;
}

// Correct rounding of x to half or bfloat16 in the given mode, by search over the bit patterns.
static unsigned short ref_round(double x, int mode, bool bf16) {
    if (std::isnan(x)) return 0x7fff;
    const unsigned max_finite = bf16 ? 0x7f7f : 0x7bff, inf = max_finite + 1;
    const double overflow = bf16 ? ldexp(1.0, 128) : 65536.0;  // where the next value would be
    unsigned short sign = std::signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (std::isinf(a)) return sign | inf;
    unsigned lo = 0, hi = inf;  // find k with value(k) <= a < value(k + 1)
    auto value = [&](unsigned k) { return k == inf ? overflow : decode(k, bf16); };
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        (value(mid) <= a ? lo : hi) = mid;
    }
    unsigned k = lo;
    if (a >= overflow) k = max_finite, a = overflow;  // beyond every finite value
    if (value(k) == a && k != max_finite + 1) return sign | k;
    bool up;
    switch (mode) {
    case RN: {
        double twice = 2 * a, mid = value(k) + value(k + 1);
        up = twice > mid || (twice == mid && (k & 1));
        break;
    }
    case RZ: up = false; break;
    case RD: up = sign != 0; break;
    default: up = sign == 0; break;
    }
    return sign | (up ? k + 1 : k);
}

static unsigned float_bits(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static float bits_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }

int main() {
    Checker check("half_bf16");
    printf("sizes: __half %zu, __half2 %zu (align %zu), __nv_bfloat16 %zu, __nv_bfloat162 %zu\n", sizeof(__half),
           sizeof(__half2), alignof(__half2), sizeof(__nv_bfloat16), sizeof(__nv_bfloat162));

    const float in[NIN] = {0.0f, -0.0f, 1.0f, -2.5f, 0.1f, 1.0f / 3, 3.14159265f, 65504.0f, 65519.0f, 65520.0f,
                           70000.0f, -1e6f, 1e-5f, 6e-8f, 2.98023224e-8f, 3e-8f, 1e-9f, 1.00048828125f,
                           1.00146484375f, 2049.0f, 2051.0f, 1.00390625f, 1.01171875f, 3.0e38f, 3.4e38f, 1e30f,
                           INFINITY, -INFINITY, NAN, -5.9604645e-08f, 1.5e-45f, -0.333333343f};
    float* d_in;
    unsigned short *d_h, *d_b;
    unsigned* d_back;
    CUDA_CHECK(cudaMalloc(&d_in, sizeof(in)));
    CUDA_CHECK(cudaMalloc(&d_h, 4 * NIN * sizeof(unsigned short)));
    CUDA_CHECK(cudaMalloc(&d_b, 4 * NIN * sizeof(unsigned short)));
    CUDA_CHECK(cudaMalloc(&d_back, 2 * NIN * sizeof(unsigned)));
    CUDA_CHECK(cudaMemcpy(d_in, in, sizeof(in), cudaMemcpyHostToDevice));
    convert<<<1, NIN>>>(d_in, d_h, d_b, d_back);
    CUDA_CHECK(cudaGetLastError());
    unsigned short h[4 * NIN], b[4 * NIN];
    unsigned back[2 * NIN];
    CUDA_CHECK(cudaMemcpy(h, d_h, sizeof(h), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(b, d_b, sizeof(b), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(back, d_back, sizeof(back), cudaMemcpyDeviceToHost));
    for (int i = 0; i < NIN; ++i) {
        for (int mode = 0; mode < 4; ++mode) {
            check.expect_eq(h[4 * i + mode], ref_round(in[i], mode, false), "float -> half");
            check.expect_eq(b[4 * i + mode], ref_round(in[i], mode, true), "float -> bfloat16");
        }
        check.expect_eq(__half_as_ushort(__float2half(in[i])), h[4 * i], "host __float2half");
        check.expect_eq(__bfloat16_as_ushort(__float2bfloat16(in[i])), b[4 * i], "host __float2bfloat16");
        bool nan = std::isnan(in[i]);
        if (!nan) {
            check.expect(decode(h[4 * i], false) == static_cast<double>(bits_float(back[2 * i])) ||
                             (h[4 * i] & 0x7fff) == 0x7c00, "half -> float");
            check.expect(decode(b[4 * i], true) == static_cast<double>(bits_float(back[2 * i + 1])) ||
                             (b[4 * i] & 0x7fff) == 0x7f80, "bfloat16 -> float");
        }
        printf("x=0x%08x  half rn %04x rz %04x rd %04x ru %04x -> %s%08x  bf16 rn %04x rz %04x rd %04x ru %04x -> %s%08x\n",
               float_bits(in[i]), h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3], nan ? "nan " : "0x",
               nan ? 0u : back[2 * i], b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3], nan ? "nan " : "0x",
               nan ? 0u : back[2 * i + 1]);
    }

    const int NA = 5;
    const unsigned short hin[3 * NA] = {0x3e00, 0x4080, 0xae66,  0x7bff, 0x4000, 0x3c00,  0x2e66, 0x3266, 0x34cd,
                                        0x0003, 0x0005, 0x0400,  0x3c01, 0x3bff, 0xbc00};
    const unsigned short bin[3 * NA] = {0x3fc0, 0x4010, 0xbdcd,  0x7f62, 0x4000, 0x3f80,  0x3dcd, 0x3e4d, 0x3e9a,
                                        0x4b00, 0x3f81, 0xc2c8,  0x3f81, 0x3f7f, 0xbf80};
    unsigned short *d_hin, *d_bin, *d_hout, *d_bout;
    CUDA_CHECK(cudaMalloc(&d_hin, sizeof(hin)));
    CUDA_CHECK(cudaMalloc(&d_bin, sizeof(bin)));
    CUDA_CHECK(cudaMalloc(&d_hout, 6 * NA * sizeof(unsigned short)));
    CUDA_CHECK(cudaMalloc(&d_bout, 6 * NA * sizeof(unsigned short)));
    CUDA_CHECK(cudaMemcpy(d_hin, hin, sizeof(hin), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_bin, bin, sizeof(bin), cudaMemcpyHostToDevice));
    arithmetic<<<1, NA>>>(d_hin, d_bin, d_hout, d_bout);
    CUDA_CHECK(cudaGetLastError());
    unsigned short hout[6 * NA], bout[6 * NA];
    CUDA_CHECK(cudaMemcpy(hout, d_hout, sizeof(hout), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(bout, d_bout, sizeof(bout), cudaMemcpyDeviceToHost));
    for (int i = 0; i < NA; ++i) {
        for (int f = 0; f < 2; ++f) {
            bool bf = f == 1;
            const unsigned short* src = bf ? bin : hin;
            const unsigned short* got = bf ? bout : hout;
            double a = decode(src[3 * i], bf), bb = decode(src[3 * i + 1], bf), c = decode(src[3 * i + 2], bf);
            const unsigned short want[6] = {ref_round(a + bb, RN, bf), ref_round(a - bb, RN, bf),
                                            ref_round(a * bb, RN, bf), ref_round(a * bb + c, RN, bf),
                                            ref_round(a > bb ? a : bb, RN, bf), ref_round(a < bb ? a : bb, RN, bf)};
            for (int k = 0; k < 6; ++k) check.expect_eq(got[6 * i + k], want[k], bf ? "bf16 arithmetic" : "half arithmetic");
            printf("%s a %04x b %04x c %04x: add %04x sub %04x mul %04x fma %04x max %04x min %04x\n", bf ? "bf16" : "half",
                   src[3 * i], src[3 * i + 1], src[3 * i + 2], got[6 * i], got[6 * i + 1], got[6 * i + 2],
                   got[6 * i + 3], got[6 * i + 4], got[6 * i + 5]);
        }
    }

    int* d_ints;
    unsigned short* d_bits;
    float* d_floats;
    __half* d_hsum;
    __nv_bfloat16* d_bsum;
    __half2* d_h2sum;
    CUDA_CHECK(cudaMalloc(&d_ints, 4 * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_bits, 7 * sizeof(unsigned short)));
    CUDA_CHECK(cudaMalloc(&d_floats, 5 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_hsum, sizeof(__half)));
    CUDA_CHECK(cudaMalloc(&d_bsum, sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMalloc(&d_h2sum, sizeof(__half2)));
    CUDA_CHECK(cudaMemset(d_hsum, 0, sizeof(__half)));
    CUDA_CHECK(cudaMemset(d_bsum, 0, sizeof(__nv_bfloat16)));
    CUDA_CHECK(cudaMemset(d_h2sum, 0, sizeof(__half2)));
    misc<<<1, 32>>>(d_ints, d_bits, d_floats, d_hsum, d_bsum, d_h2sum);
    CUDA_CHECK(cudaGetLastError());
    int ints[4];
    unsigned short bits[7];
    float floats[5];
    __half hsum;
    __nv_bfloat16 bsum;
    __half2 h2sum;
    CUDA_CHECK(cudaMemcpy(ints, d_ints, sizeof(ints), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(bits, d_bits, sizeof(bits), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(floats, d_floats, sizeof(floats), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&hsum, d_hsum, sizeof(hsum), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&bsum, d_bsum, sizeof(bsum), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&h2sum, d_h2sum, sizeof(h2sum), cudaMemcpyDeviceToHost));
    const int want_ints[4] = {-7, 2, 4, -124};  // bfloat16(-123.9) is -124 (its ulp there is 0.5)
    for (int k = 0; k < 4; ++k) check.expect_eq(ints[k], want_ints[k], "16-bit -> int");
    const unsigned short want_bits[5] = {ref_round(2049, RN, false), ref_round(65519, RN, false),
                                         ref_round(65520, RN, false), ref_round(1.0 + 1.0 / 2048 + 1.0 / (1LL << 40), RN, false),
                                         ref_round(1.0 + 1.0 / 256 + 1.0 / (1LL << 40), RN, true)};
    for (int k = 0; k < 5; ++k) check.expect_eq(bits[k], want_bits[k], "int/double -> 16-bit");
    check.expect(floats[4] == 124.0f, "__half shuffle sum");
    check.expect(__half2float(hsum) == 16.0f && __bfloat162float(bsum) == 8.0f, "16-bit atomicAdd");
    check.expect(__low2float(h2sum) == 32.0f && __high2float(h2sum) == -4.0f, "__half2 atomicAdd");
    printf("ints %d %d %d %d, bits %04x %04x %04x %04x %04x, half2 pair %04x %04x (%.6f %.6f), bf16 pair %.6f %.6f\n",
           ints[0], ints[1], ints[2], ints[3], bits[0], bits[1], bits[2], bits[3], bits[4], bits[5], bits[6],
           floats[0], floats[1], floats[2], floats[3]);
    printf("half shuffle sum %.2f, atomics: half %.2f bf16 %.2f half2 %.3f %.3f\n", floats[4], __half2float(hsum),
           __bfloat162float(bsum), __low2float(h2sum), __high2float(h2sum));
    return check.finish();
}
