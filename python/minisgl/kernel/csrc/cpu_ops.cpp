// The small ops of a decoder layer on a CPU, each in one call (chapter 20, for the CPU).
//
// A batch-1 decode step of SmolLM2 on a 2-core CPU makes about 4,000 torch calls from Python;
// each costs microseconds before it computes anything, and RMSNorm, RoPE and SiLU-and-mul are a
// dozen calls each. Here each of them is one call, and so is the linear layer:
//   linear        y = x W^T + b, register tiles of 3 rows x 4 outputs (see `tile`)
//   add_rmsnorm   r = x + residual, y = r / sqrt(mean(r^2) + eps) * w
//   silu_mul      y = silu(gate) * up, on the merged [gate | up] row
//   rope          q and k of the merged q|k|v row, normalised per head (Qwen3) and rotated
// Everything is computed in fp32; bf16 is converted on load and rounded to nearest-even once on
// store (torch's bf16 ops round after every op, so bf16 results may differ in the last bit).
//
// The vectors are GCC's portable vector type: 8 floats, which -march=native turns into one AVX2
// register (two SSE registers, or NEON, elsewhere). Rows of outputs run in parallel with OpenMP,
// the runtime torch's threads use. Built just in time by minisgl/kernel/cpu_ops.py and called
// through ctypes, like csrc/cpu_attention.cpp.

#include <cmath>
#include <cstdint>
#include <cstring>

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
// so it streams its part of W from memory in order
template <typename T>
void linear(const T* x, int64_t ldx, const T* w, const T* bias, T* y, int64_t ldy, int64_t rows,
            int64_t n, int64_t k, int threads) {
    const int64_t blocks = (n + 3) / 4;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t j = b * 4;
        if (j + 4 <= n) {
            outputs<T, 4>(x, ldx, w + j * k, k, bias ? bias + j : nullptr, y + j, ldy, rows);
        } else {
            for (int64_t jj = j; jj < n; jj++)
                outputs<T, 1>(x, ldx, w + jj * k, k, bias ? bias + jj : nullptr, y + jj, ldy, rows);
        }
    }
}

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
#pragma omp parallel for num_threads(threads) schedule(static) if (rows * inter >= 65536)
    for (int64_t r = 0; r < rows; r++) {
        const T* gate = x + r * ldx;
        const T* up = gate + inter;
        for (int64_t c = 0; c < inter; c++) {
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
