// The small ops of a decoder layer on a CPU, each in one call (chapter 20, for the CPU).
//
// A batch-1 decode step of SmolLM2 on a 2-core CPU makes about 4,000 torch calls from Python;
// each costs microseconds before it computes anything, and RMSNorm, RoPE and SiLU-and-mul are a
// dozen calls each. Here each of them is one call, and so is the linear layer:
//   linear        y = x W^T + b, register tiles of 3 rows x 4 outputs (see `tile`)
//   add_rmsnorm   r = x + residual, y = r / sqrt(mean(r^2) + eps) * w
//   silu_mul      y = silu(gate) * up, on the merged [gate | up] row
//   rope          q and k of the merged q|k|v row, normalised per head (Qwen3) and rotated
// and, built from them, a whole decode step of a dense model in one call (`decode_step`).
// Everything is computed in fp32; bf16 is converted on load and rounded to nearest-even once on
// store (torch's bf16 ops round after every op, so bf16 results may differ in the last bit).
//
// The vectors are GCC's portable vector type: 8 floats, which -march=native turns into one AVX2
// register (two SSE registers, or NEON, elsewhere). Rows of outputs run in parallel with OpenMP,
// the runtime torch's threads use. Built just in time by minisgl/kernel/cpu_ops.py and called
// through ctypes, like csrc/cpu_attention.cpp.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#if defined(__AVX512F__)  // built with -march=native on a CPU with AVX-512
#include <immintrin.h>
#define MINISGL_AVX512 1
#if defined(__AVX512BF16__)  // ... and its bf16 dot product
#define MINISGL_DPBF16 1
#endif
#endif

namespace {

typedef float f32x8 __attribute__((vector_size(32)));
typedef uint16_t u16x8 __attribute__((vector_size(16)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));

inline float load(float x) { return x; }

inline float load(uint16_t x) {  // bf16 is the top half of an fp32
    const uint32_t bits = static_cast<uint32_t>(x) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

inline f32x8 load8(const float* p) {
    f32x8 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline f32x8 load8(const uint16_t* p) {
    u16x8 half;
    std::memcpy(&half, p, sizeof half);
    const u32x8 bits = __builtin_convertvector(half, u32x8) << 16;
    f32x8 v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

inline void store(float x, float* out) { *out = x; }

inline void store(float x, uint16_t* out) {  // round to nearest, ties to even
    if (std::isnan(x)) {
        *out = 0x7fc0;
        return;
    }
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    bits += 0x7fff + ((bits >> 16) & 1);
    *out = static_cast<uint16_t>(bits >> 16);
}

// Eight values rounded to T's precision and kept as floats (bf16: to nearest, ties to even, NaN
// stays NaN), and stored as T.
typedef int32_t i32x8 __attribute__((vector_size(32)));

inline f32x8 round8(f32x8 v, float*) { return v; }

inline f32x8 round8(f32x8 v, uint16_t*) {
    u32x8 bits;
    std::memcpy(&bits, &v, sizeof bits);
    const u32x8 rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
    const u32x8 nan = reinterpret_cast<u32x8>(v != v);  // all ones where v is NaN
    const u32x8 out = (nan & 0x7fc00000u) | (~nan & rounded);
    f32x8 f;
    std::memcpy(&f, &out, sizeof f);
    return f;
}

inline void store8(f32x8 v, float* out) { std::memcpy(out, &v, sizeof v); }

inline void store8(f32x8 v, uint16_t* out) {  // rounded, then the top halves of the bits
    u32x8 bits;
    const f32x8 r = round8(v, out);
    std::memcpy(&bits, &r, sizeof bits);
    const u16x8 half = __builtin_convertvector(bits >> 16, u16x8);
    std::memcpy(out, &half, sizeof half);
}

// e^x for eight floats: x = n ln2 + r with |r| <= ln2/2, e^r by its Taylor polynomial to r^7
// (relative error about 1e-7, as std::exp's), and 2^n put straight into the exponent bits. One
// std::exp per element is a call the compiler cannot vectorise: SiLU spent most of its time there.
inline f32x8 exp8(f32x8 x) {
    const f32x8 lo = f32x8{} - 87.0f, hi = f32x8{} + 88.0f;  // 2^n stays a normal float
    const i32x8 overflow = x > hi;  // e^x is inf there (and x / (1 + e^x) NaN for x = inf)
    x = x < lo ? lo : x;
    x = x > hi ? hi : x;
    const f32x8 t = x * 1.44269504088896341f;  // x / ln 2
    const i32x8 n = __builtin_convertvector(t + (t < 0 ? -0.5f : 0.5f), i32x8);  // round
    const f32x8 nf = __builtin_convertvector(n, f32x8);
    const f32x8 r = (x - nf * 0.693359375f) + nf * 2.12194440e-4f;  // ln 2 in two parts
    f32x8 p = f32x8{} + 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const i32x8 scale_bits = (n + 127) << 23;
    f32x8 scale;
    std::memcpy(&scale, &scale_bits, sizeof scale);
    const f32x8 inf = f32x8{} + __builtin_inff();
    return overflow ? inf : p * scale;
}

inline float sum8(f32x8 v) { return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])); }

// ---- linear -----------------------------------------------------------------------------------
// A tile is MR input rows times NR weight rows (outputs): each step of 8 along K loads MR pieces
// of x and NR of W and does MR * NR vector multiply-adds. 3 x 4 keeps the 12 sums, 3 x pieces and
// one W piece in the 16 registers AVX2 has: W is read from memory once per 3 rows of x, and at
// batch 1 it is read exactly once, which is all a GEMV can do (memory-bound).
template <typename T, int MR, int NR>
void tile(const T* x, int64_t ldx, const T* w, int64_t k_len, const T* bias, T* y, int64_t ldy) {
    f32x8 acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = f32x8{};
    int64_t k = 0;
    for (; k + 8 <= k_len; k += 8) {
        f32x8 xs[MR];
        for (int i = 0; i < MR; i++) xs[i] = load8(x + i * ldx + k);
        for (int j = 0; j < NR; j++) {
            const f32x8 wv = load8(w + j * k_len + k);
            for (int i = 0; i < MR; i++) acc[i][j] += xs[i] * wv;
        }
    }
    for (int i = 0; i < MR; i++) {
        for (int j = 0; j < NR; j++) {
            float s = sum8(acc[i][j]);
            for (int64_t t = k; t < k_len; t++) s += load(x[i * ldx + t]) * load(w[j * k_len + t]);
            if (bias) s += load(bias[j]);
            store(s, y + i * ldy + j);
        }
    }
}

// NR outputs for every row of x, MR rows at a time
template <typename T, int NR>
void outputs(const T* x, int64_t ldx, const T* w, int64_t k_len, const T* bias, T* y, int64_t ldy,
             int64_t rows) {
    int64_t m = 0;
    for (; m + 3 <= rows; m += 3) tile<T, 3, NR>(x + m * ldx, ldx, w, k_len, bias, y + m * ldy, ldy);
    if (rows - m == 2) tile<T, 2, NR>(x + m * ldx, ldx, w, k_len, bias, y + m * ldy, ldy);
    if (rows - m == 1) tile<T, 1, NR>(x + m * ldx, ldx, w, k_len, bias, y + m * ldy, ldy);
}

// y[rows, n] = x[rows, k] W[n, k]^T (+ bias[n]); each thread takes a contiguous band of W's rows,
// so it streams its part of W from memory in order. Long inputs (a prefill) go through in chunks
// of kChunkRows rows, which stay in the L2 cache while the band of W passes over them: without
// the chunks every 4 rows of W would read all of x again, from memory once x outgrows the caches.
// At prefill sizes oneDNN's packed weights are still about an eighth faster
// (benchmarks/results/cpu_linear_cpp_prefill.txt): its kernel broadcasts x and keeps the sums
// along N, with no horizontal sums at the end of each dot product.
constexpr int64_t kChunkRows = 48;

template <typename T>
void linear(const T* x, int64_t ldx, const T* w, const T* bias, T* y, int64_t ldy, int64_t rows,
            int64_t n, int64_t k, int threads) {
    const int64_t blocks = (n + 3) / 4;
#pragma omp parallel num_threads(threads)
    for (int64_t m = 0; m < rows; m += kChunkRows) {
        const int64_t chunk = rows - m < kChunkRows ? rows - m : kChunkRows;
        const T* xc = x + m * ldx;
        T* yc = y + m * ldy;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < blocks; b++) {
            const int64_t j = b * 4;
            if (j + 4 <= n) {
                outputs<T, 4>(xc, ldx, w + j * k, k, bias ? bias + j : nullptr, yc + j, ldy,
                              chunk);
            } else {
                for (int64_t jj = j; jj < n; jj++)
                    outputs<T, 1>(xc, ldx, w + jj * k, k, bias ? bias + jj : nullptr, yc + jj,
                                  ldy, chunk);
            }
        }
    }
}

// ---- linear over weight panels (AVX-512) -----------------------------------------------------
// W is packed once into panels of 16 outputs: [n / 16][k / kIn][16][kIn], zeros past the ends.
// One 64-byte load of a panel holds the next kIn inputs of 16 outputs, one broadcast of x's kIn
// inputs feeds it, and one instruction adds into 16 fp32 sums that stay in the vector's lanes to
// the end: no horizontal sum at all (the plain `tile` above needs one per output).
//   bf16: kIn = 2, vdpbf16ps (AVX-512 BF16) multiplies 16 pairs and adds each pair into a lane;
//   fp32: kIn = 1, vfmadd231ps (AVX-512F).
// A tile is MR rows x NR panels (6 x 4: 24 of the 32 vector registers hold sums); all the rows
// of x pass over a tile of W while it is in the cache, so W is read from memory once per call
// however many rows there are. (4 x 4 was 10-20% slower than oneDNN for fp32 at 17-512 rows; 6
// x 4 is faster than it at 1 to 32 rows and within a few percent at 512, in both dtypes:
// benchmarks/results/cpu_linear_panels.txt)
#ifdef MINISGL_AVX512
constexpr int kPanel = 16;  // outputs per panel: one vector of fp32 sums
constexpr int kPanelsPerTile = 4;

#ifdef MINISGL_DPBF16
struct Bf16Panels {
    using T = uint16_t;
    static constexpr int kIn = 2;
    using W = __m512bh;
    static W load(const T* p) { return (__m512bh)_mm512_loadu_si512(p); }
    static W broadcast(const T* x, bool alone) {  // alone: x's last input of an odd K
        int32_t pair = *x;  // the partner zero, not whatever follows x in memory
        if (!alone) std::memcpy(&pair, x, sizeof pair);
        return (__m512bh)_mm512_set1_epi32(pair);
    }
    static __m512 madd(__m512 acc, W x, W w) { return _mm512_dpbf16_ps(acc, x, w); }
    static void store(__m512 v, T* out, __mmask16 mask) {  // rounded to nearest even
        _mm256_mask_storeu_epi16(out, mask, (__m256i)_mm512_cvtneps_pbh(v));
    }
    static __m512 load_bias(const T* b, __mmask16 mask) {
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, b)), 16));
    }
};
#endif  // MINISGL_DPBF16

struct F32Panels {
    using T = float;
    static constexpr int kIn = 1;
    using W = __m512;
    static W load(const T* p) { return _mm512_loadu_ps(p); }
    static W broadcast(const T* x, bool) { return _mm512_set1_ps(*x); }
    static __m512 madd(__m512 acc, W x, W w) { return _mm512_fmadd_ps(x, w, acc); }
    static void store(__m512 v, T* out, __mmask16 mask) { _mm512_mask_storeu_ps(out, mask, v); }
    static __m512 load_bias(const T* b, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, b); }
};

template <typename P>
void pack_panels(const typename P::T* w, int64_t n, int64_t k, typename P::T* packed) {
    const int64_t steps = (k + P::kIn - 1) / P::kIn, panels = (n + kPanel - 1) / kPanel;
    for (int64_t p = 0; p < panels; p++)
        for (int64_t t = 0; t < steps; t++)
            for (int i = 0; i < kPanel; i++)
                for (int j = 0; j < P::kIn; j++) {
                    const int64_t row = p * kPanel + i, col = t * P::kIn + j;
                    packed[((p * steps + t) * kPanel + i) * P::kIn + j] =
                        row < n && col < k ? w[row * k + col] : typename P::T{};
                }
}

template <typename P, int MR, int NR>
void panel_tile(const typename P::T* x, int64_t ldx, int64_t k, const typename P::T* panel,
                int64_t panel_size, const typename P::T* bias, int64_t outputs,
                typename P::T* y, int64_t ldy) {
    __m512 acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = _mm512_setzero_ps();
    const int64_t steps = (k + P::kIn - 1) / P::kIn;
    for (int64_t t = 0; t < steps; t++) {
        const bool alone = (t + 1) * P::kIn > k;
        typename P::W w[NR];
        for (int j = 0; j < NR; j++) w[j] = P::load(panel + j * panel_size + t * P::kIn * kPanel);
        for (int i = 0; i < MR; i++) {
            const typename P::W xi = P::broadcast(x + i * ldx + t * P::kIn, alone);
            for (int j = 0; j < NR; j++) acc[i][j] = P::madd(acc[i][j], xi, w[j]);
        }
    }
    for (int j = 0; j < NR; j++) {
        const int64_t left = outputs - j * kPanel;
        if (left <= 0) break;
        const __mmask16 mask = left >= kPanel ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
        const __m512 b = bias ? P::load_bias(bias + j * kPanel, mask) : _mm512_setzero_ps();
        for (int i = 0; i < MR; i++)
            P::store(_mm512_add_ps(acc[i][j], b), y + i * ldy + j * kPanel, mask);
    }
}

template <typename P, int MR>
void panel_rows(const typename P::T* x, int64_t ldx, int64_t k, const typename P::T* panel,
                int64_t panel_size, int panels, const typename P::T* bias, int64_t outputs,
                typename P::T* y, int64_t ldy) {
    switch (panels) {
        case 1: panel_tile<P, MR, 1>(x, ldx, k, panel, panel_size, bias, outputs, y, ldy); break;
        case 2: panel_tile<P, MR, 2>(x, ldx, k, panel, panel_size, bias, outputs, y, ldy); break;
        case 3: panel_tile<P, MR, 3>(x, ldx, k, panel, panel_size, bias, outputs, y, ldy); break;
        default: panel_tile<P, MR, 4>(x, ldx, k, panel, panel_size, bias, outputs, y, ldy);
    }
}

template <typename P>
void linear_panels(const typename P::T* x, int64_t ldx, const typename P::T* packed,
                   const typename P::T* bias, typename P::T* y, int64_t ldy, int64_t rows,
                   int64_t n, int64_t k, int threads) {
    const int64_t steps = (k + P::kIn - 1) / P::kIn, panels = (n + kPanel - 1) / kPanel;
    const int64_t panel_size = steps * P::kIn * kPanel;  // elements of one panel
    const int64_t tiles = (panels + kPanelsPerTile - 1) / kPanelsPerTile;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t tile = 0; tile < tiles; tile++) {
        const int64_t p0 = tile * kPanelsPerTile;
        const int np = static_cast<int>(std::min<int64_t>(kPanelsPerTile, panels - p0));
        const int64_t j0 = p0 * kPanel, outputs = std::min<int64_t>(np * kPanel, n - j0);
        const typename P::T* panel = packed + p0 * panel_size;
        const typename P::T* b = bias ? bias + j0 : nullptr;
        int64_t m = 0;
        for (; m + 6 <= rows; m += 6)
            panel_rows<P, 6>(x + m * ldx, ldx, k, panel, panel_size, np, b, outputs,
                             y + m * ldy + j0, ldy);
        const typename P::T* xm = x + m * ldx;
        typename P::T* ym = y + m * ldy + j0;
        switch (rows - m) {
            case 5: panel_rows<P, 5>(xm, ldx, k, panel, panel_size, np, b, outputs, ym, ldy); break;
            case 4: panel_rows<P, 4>(xm, ldx, k, panel, panel_size, np, b, outputs, ym, ldy); break;
            case 3: panel_rows<P, 3>(xm, ldx, k, panel, panel_size, np, b, outputs, ym, ldy); break;
            case 2: panel_rows<P, 2>(xm, ldx, k, panel, panel_size, np, b, outputs, ym, ldy); break;
            case 1: panel_rows<P, 1>(xm, ldx, k, panel, panel_size, np, b, outputs, ym, ldy); break;
            default: break;
        }
    }
}

#endif  // MINISGL_AVX512

// ---- add + RMSNorm ----------------------------------------------------------------------------
// One row of h values (already x + residual, in fp32): out = h / sqrt(mean(h^2) + eps) * weight.
// The normalised value is rounded to T before the weight multiplies it, as the torch code does.
template <typename T>
void rmsnorm_row(const float* h, const T* weight, float eps, int64_t dim, T* out) {
    f32x8 sq{};
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
        const f32x8 v = load8(h + i);
        sq += v * v;
    }
    float sum = sum8(sq);
    for (; i < dim; i++) sum += h[i] * h[i];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    for (int64_t c = 0; c < dim; c++) {
        T normed;
        store(h[c] * inv, &normed);
        store(load(weight[c]) * load(normed), out + c);
    }
}

// residual_out = x + residual (x alone when residual is null), out = rmsnorm(residual_out)
template <typename T>
void add_rmsnorm(const T* x, int64_t ldx, const T* residual, int64_t ldr, const T* weight,
                 float eps, T* out, T* residual_out, int64_t rows, int64_t dim, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        float h[dim];  // NOLINT: a row of the hidden size, on the stack
        for (int64_t c = 0; c < dim; c++) {
            float v = load(x[r * ldx + c]);
            if (residual) {
                T sum;  // the residual stream is stored in T: round the sum as torch does
                store(v + load(residual[r * ldr + c]), &sum);
                v = load(sum);
                residual_out[r * dim + c] = sum;
            }
            h[c] = v;
        }
        rmsnorm_row(h, weight, eps, dim, out + r * dim);
    }
}

// ---- SiLU-and-mul -----------------------------------------------------------------------------
template <typename T>
void silu_mul(const T* x, int64_t ldx, T* out, int64_t rows, int64_t inter, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (rows * inter >= 16384)
    for (int64_t r = 0; r < rows; r++) {
        const T* gate = x + r * ldx;
        const T* up = gate + inter;
        int64_t c = 0;
        for (; c + 8 <= inter; c += 8) {
            const f32x8 g = load8(gate + c);
            const f32x8 act = round8(g / (1.0f + exp8(-g)), out);
            store8(act * load8(up + c), out + r * inter + c);
        }
        for (; c < inter; c++) {
            const float g = load(gate[c]);
            T act;  // silu(gate) rounded to T, then the product, as the two torch ops do
            store(g / (1.0f + std::exp(-g)), &act);
            store(load(act) * load(up[c]), out + r * inter + c);
        }
    }
}

// ---- RoPE -------------------------------------------------------------------------------------
// One head of `dim` values: normalised when norm_weight is given (Qwen3), then each pair
// (i, i + dim/2) rotated by the position's angle: out = h * cos + rotate_half(h) * sin.
template <typename T>
void rope_head(const T* in, const T* norm_weight, float eps, const float* cos, const float* sin,
               int64_t dim, T* out) {
    float h[dim];  // NOLINT
    for (int64_t c = 0; c < dim; c++) h[c] = load(in[c]);
    if (norm_weight) {
        T normed[dim];  // NOLINT
        rmsnorm_row(h, norm_weight, eps, dim, normed);
        for (int64_t c = 0; c < dim; c++) h[c] = load(normed[c]);
    }
    const int64_t half = dim / 2;
    for (int64_t c = 0; c < half; c++) {
        store(h[c] * cos[c] - h[c + half] * sin[c], out + c);
        store(h[c + half] * cos[c + half] + h[c] * sin[c + half], out + c + half);
    }
}

// q [tokens, qo_heads, dim] and k [tokens, kv_heads, dim] from the rows of qkv; cos/sin are fp32
// tables [table_rows, dim]. Returns how many tokens had a position outside the tables (those are
// left unwritten and the caller raises).
template <typename T>
int64_t rope(const T* qkv, int64_t ld, const int64_t* positions, const float* cos,
             const float* sin, int64_t table_rows, const T* q_norm, const T* k_norm, float eps,
             T* q_out, T* k_out, int64_t tokens, int64_t qo_heads, int64_t kv_heads, int64_t dim,
             int threads) {
    int64_t bad = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : bad) if (tokens > 1)
    for (int64_t t = 0; t < tokens; t++) {
        const int64_t pos = positions[t];
        if (pos < 0 || pos >= table_rows) {
            bad++;
            continue;
        }
        const float* c = cos + pos * dim;
        const float* s = sin + pos * dim;
        const T* row = qkv + t * ld;
        for (int64_t h = 0; h < qo_heads; h++)
            rope_head(row + h * dim, q_norm, eps, c, s, dim, q_out + (t * qo_heads + h) * dim);
        for (int64_t h = 0; h < kv_heads; h++)
            rope_head(row + (qo_heads + h) * dim, k_norm, eps, c, s, dim,
                      k_out + (t * kv_heads + h) * dim);
    }
    return bad;
}

// ---- a whole decode step ----------------------------------------------------------------------
// Every decoder layer of a dense Llama/Qwen2/Qwen3 model for a batch of one new token per request,
// in one call: the ops above in the order of models/base.py, with no Python between them. Python
// fills the structs once per model (weights and the K/V pool do not move) and once per step.
struct LayerWeights {  // plain [out, in] weights of one layer; a null pointer is "none"
    const void* input_norm;
    const void* qkv;
    const void* qkv_bias;  // Qwen2
    const void* q_norm;    // Qwen3: per-head RMSNorm of q and k
    const void* k_norm;
    const void* o_proj;
    const void* post_norm;
    const void* gate_up;
    const void* down;
    void* k_cache;  // this layer's [slots, kv_heads, head_dim] pools
    void* v_cache;
};

struct DecodeModel {
    int64_t num_layers, hidden, inter, qo_heads, kv_heads, head_dim;
    float eps, scale;
    const LayerWeights* layers;
    const void* final_norm;
    const float* cos;  // [table_rows, head_dim] rotary tables
    const float* sin;
    int64_t table_rows;
    int64_t num_slots;  // K/V slots of each layer's pool
    const int32_t* page_table;
    int64_t page_table_stride, page_table_rows;
    const void* attention;  // minisgl_cpu_decode_attention_<type> of csrc/cpu_attention.cpp
    int64_t packed;         // the layers' weights are packed panels (kernel/cpu_ops.py)
};

struct DecodeBatch {
    int64_t size;
    void* hidden;  // [size, hidden]: the embeddings in; the running hidden state
    void* out;     // [size, hidden]: the final norm's output
    void* residual;
    void* qkv;  // scratch: [size, (qo + 2 kv) * head_dim], q, k, attention output, gate_up, act
    void* q;
    void* k;
    void* attn;
    void* gate_up;
    void* act;
    const int64_t* positions;
    const int64_t* out_loc;
    const int64_t* table_rows;
    const int64_t* kv_lens;
    int threads;
};

template <typename T>
using AttentionFn = int64_t (*)(const T*, const T*, const T*, int64_t, int64_t, const int32_t*,
                                int64_t, const int64_t*, const int64_t*, T*, int64_t, int64_t,
                                int64_t, int64_t, float, int);

// What a step can get wrong, checked before anything is written: the caller raises for it.
enum StepError : int64_t {
    kOk = 0,
    kBadPosition = 1,   // a position outside the rotary tables
    kBadSlot = 2,       // an out_loc outside the K/V pool
    kBadTableRow = 3,   // a table row outside the page table, or a length outside its rows
    kBadPageEntry = 4,  // the attention kernel found a page-table slot outside the pool
};

// A projection of the decode step: over plain weights, or over packed panels.
template <typename T>
void project(const DecodeModel& m, const T* x, int64_t ldx, const T* w, const T* bias, T* y,
             int64_t ldy, int64_t rows, int64_t n, int64_t k, int threads) {
#ifdef MINISGL_AVX512
    if constexpr (std::is_same_v<T, float>) {
        if (m.packed)
            return linear_panels<F32Panels>(x, ldx, w, bias, y, ldy, rows, n, k, threads);
    }
#endif
#ifdef MINISGL_DPBF16
    if constexpr (std::is_same_v<T, uint16_t>) {
        if (m.packed)
            return linear_panels<Bf16Panels>(x, ldx, w, bias, y, ldy, rows, n, k, threads);
    }
#endif
    linear<T>(x, ldx, w, bias, y, ldy, rows, n, k, threads);  // (Python packs only where it can)
}

template <typename T>
int64_t decode_step(const DecodeModel& m, const DecodeBatch& b) {
    const int64_t n = b.size, h = m.hidden, d = m.head_dim;
    const int64_t q_width = m.qo_heads * d, kv_width = m.kv_heads * d;
    const int64_t qkv_width = q_width + 2 * kv_width;
    for (int64_t i = 0; i < n; i++) {
        if (b.positions[i] < 0 || b.positions[i] >= m.table_rows) return kBadPosition;
        if (b.out_loc[i] < 0 || b.out_loc[i] >= m.num_slots) return kBadSlot;
        if (b.table_rows[i] < 0 || b.table_rows[i] >= m.page_table_rows || b.kv_lens[i] < 1 ||
            b.kv_lens[i] > m.page_table_stride)
            return kBadTableRow;
    }
    T* x = static_cast<T*>(b.hidden);
    T* residual = static_cast<T*>(b.residual);
    T* normed = static_cast<T*>(b.out);  // the norms' output; the last one is the step's output
    T* qkv = static_cast<T*>(b.qkv);
    T* q = static_cast<T*>(b.q);
    T* k = static_cast<T*>(b.k);
    T* attn = static_cast<T*>(b.attn);
    T* gate_up = static_cast<T*>(b.gate_up);
    T* act = static_cast<T*>(b.act);
    const auto attention = reinterpret_cast<AttentionFn<T>>(m.attention);
    auto w = [](const void* p) { return static_cast<const T*>(p); };
    for (int64_t l = 0; l < m.num_layers; l++) {
        const LayerWeights& lw = m.layers[l];
        if (l == 0) {  // the first layer's residual is its input itself
            std::memcpy(residual, x, n * h * sizeof(T));
            add_rmsnorm<T>(x, h, nullptr, 0, w(lw.input_norm), m.eps, normed, nullptr, n, h,
                           b.threads);
        } else {
            add_rmsnorm<T>(x, h, residual, h, w(lw.input_norm), m.eps, normed, residual, n, h,
                           b.threads);
        }
        project<T>(m, normed, h, w(lw.qkv), w(lw.qkv_bias), qkv, qkv_width, n, qkv_width, h,
                   b.threads);
        rope<T>(qkv, qkv_width, b.positions, m.cos, m.sin, m.table_rows, w(lw.q_norm),
                w(lw.k_norm), m.eps, q, k, n, m.qo_heads, m.kv_heads, d, b.threads);
        T* k_cache = static_cast<T*>(lw.k_cache);
        T* v_cache = static_cast<T*>(lw.v_cache);
        for (int64_t i = 0; i < n; i++) {  // the new token's K and V into its slot of the pool
            std::memcpy(k_cache + b.out_loc[i] * kv_width, k + i * kv_width, kv_width * sizeof(T));
            std::memcpy(v_cache + b.out_loc[i] * kv_width, qkv + i * qkv_width + q_width + kv_width,
                        kv_width * sizeof(T));
        }
        if (attention(q, k_cache, v_cache, kv_width, m.num_slots, m.page_table,
                      m.page_table_stride, b.table_rows, b.kv_lens, attn, n, m.qo_heads,
                      m.kv_heads, d, m.scale, b.threads))
            return kBadPageEntry;
        project<T>(m, attn, q_width, w(lw.o_proj), nullptr, x, h, n, h, q_width, b.threads);
        add_rmsnorm<T>(x, h, residual, h, w(lw.post_norm), m.eps, normed, residual, n, h,
                       b.threads);
        project<T>(m, normed, h, w(lw.gate_up), nullptr, gate_up, 2 * m.inter, n, 2 * m.inter,
                   h, b.threads);
        silu_mul<T>(gate_up, 2 * m.inter, act, n, m.inter, b.threads);
        project<T>(m, act, m.inter, w(lw.down), nullptr, x, h, n, h, m.inter, b.threads);
    }
    add_rmsnorm<T>(x, h, residual, h, w(m.final_norm), m.eps, normed, residual, n, h, b.threads);
    return kOk;
}

}  // namespace

// The C entry points: one per op and element type (f32, and bf16 passed as uint16_t).
#define MINISGL_CPU_OPS(NAME, T)                                                                  \
    extern "C" void minisgl_cpu_linear_##NAME(const T* x, int64_t ldx, const T* w, const T* bias, \
                                              T* y, int64_t ldy, int64_t rows, int64_t n,         \
                                              int64_t k, int threads) {                           \
        linear(x, ldx, w, bias, y, ldy, rows, n, k, threads);                                     \
    }                                                                                             \
    extern "C" void minisgl_cpu_add_rmsnorm_##NAME(                                               \
        const T* x, int64_t ldx, const T* residual, int64_t ldr, const T* weight, float eps,     \
        T* out, T* residual_out, int64_t rows, int64_t dim, int threads) {                        \
        add_rmsnorm(x, ldx, residual, ldr, weight, eps, out, residual_out, rows, dim, threads);   \
    }                                                                                             \
    extern "C" void minisgl_cpu_silu_mul_##NAME(const T* x, int64_t ldx, T* out, int64_t rows,   \
                                                int64_t inter, int threads) {                     \
        silu_mul(x, ldx, out, rows, inter, threads);                                              \
    }                                                                                             \
    extern "C" int64_t minisgl_cpu_rope_##NAME(                                                   \
        const T* qkv, int64_t ld, const int64_t* positions, const float* cos, const float* sin,  \
        int64_t table_rows, const T* q_norm, const T* k_norm, float eps, T* q_out, T* k_out,     \
        int64_t tokens, int64_t qo_heads, int64_t kv_heads, int64_t dim, int threads) {           \
        return rope(qkv, ld, positions, cos, sin, table_rows, q_norm, k_norm, eps, q_out, k_out, \
                    tokens, qo_heads, kv_heads, dim, threads);                                    \
    }

MINISGL_CPU_OPS(f32, float)
MINISGL_CPU_OPS(bf16, uint16_t)

extern "C" int64_t minisgl_cpu_decode_step_f32(const DecodeModel* m, const DecodeBatch* b) {
    return decode_step<float>(*m, *b);
}
extern "C" int64_t minisgl_cpu_decode_step_bf16(const DecodeModel* m, const DecodeBatch* b) {
    return decode_step<uint16_t>(*m, *b);
}

// Panels exist where the library was built with AVX-512 (bf16 panels: with AVX-512 BF16 too).
// Python asks first: 1 for fp32, 2 for fp32 and bf16, 0 for none.
extern "C" int minisgl_cpu_panel_dtypes() {
#if defined(MINISGL_DPBF16)
    return 2;
#elif defined(MINISGL_AVX512)
    return 1;
#else
    return 0;
#endif
}

#ifdef MINISGL_AVX512
#define MINISGL_CPU_PANELS(NAME, P)                                                               \
    extern "C" void minisgl_cpu_pack_panels_##NAME(const P::T* w, int64_t n, int64_t k,          \
                                                   P::T* packed) {                                \
        pack_panels<P>(w, n, k, packed);                                                          \
    }                                                                                             \
    extern "C" void minisgl_cpu_linear_panels_##NAME(const P::T* x, int64_t ldx,                 \
                                                     const P::T* packed, const P::T* bias,        \
                                                     P::T* y, int64_t ldy, int64_t rows,          \
                                                     int64_t n, int64_t k, int threads) {         \
        linear_panels<P>(x, ldx, packed, bias, y, ldy, rows, n, k, threads);                      \
    }
MINISGL_CPU_PANELS(f32, F32Panels)
#ifdef MINISGL_DPBF16
MINISGL_CPU_PANELS(bf16, Bf16Panels)
#endif
#endif
