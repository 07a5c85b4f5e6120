// Decode attention on a CPU, straight over the paged KV pool (chapter 20, for the CPU).
//
// One new query token per request attends over every token of its sequence. The torch backend
// first gathers each request's K and V rows into a new tensor and then calls SDPA: on a CPU that
// copy costs as much as the attention itself, and SDPA's kernel is built for long query blocks,
// not for one token. Here each (request, KV head) pair reads its K and V rows where they lie in
// the pool, through the page table, exactly once:
//   pass 1: scores s[g][j] = scale * q_g . k_j for the G query heads that share this KV head
//   softmax over j in fp32 (the largest score subtracted first, as every softmax must)
//   pass 2: out_g = sum_j p[g][j] * v_j / sum_j p[g][j]
// Pass 1 on bf16 uses AVX-512 BF16's dot-product instruction where the build has it (-march=native
// on such a CPU), and pass 2 keeps its sums in AVX-512 registers; elsewhere both are plain C++
// that the compiler vectorises.
// Everything is accumulated in fp32; bf16 is converted on load and rounded to nearest-even on
// store, as torch does. Pairs run in parallel with OpenMP (the same runtime torch's threads use:
// the library is loaded into a process that has already loaded torch's libgomp).
//
// Built just in time by minisgl/kernel/cpu_attention.py and called through ctypes.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__)  // built with -march=native on a CPU with AVX-512
#include <immintrin.h>
#define MINISGL_AVX512 1
#if defined(__AVX512BF16__)  // ... and its bf16 dot product
#define MINISGL_DPBF16 1
#endif
#endif

namespace {

inline float load(float x) { return x; }

inline float load(uint16_t x) {  // bf16 is the top half of an fp32
    const uint32_t bits = static_cast<uint32_t>(x) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

inline void store(float x, float* out) { *out = x; }

inline void store(float x, uint16_t* out) {  // round to nearest, ties to even
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    if (std::isnan(x)) {
        *out = 0x7fc0;
        return;
    }
    bits += 0x7fff + ((bits >> 16) & 1);
    *out = static_cast<uint16_t>(bits >> 16);
}

// A request's keys and values lie wherever its pages are: each step of the loops below jumps to
// a slot whose address the hardware prefetcher cannot guess, and waits for memory at every new
// page. Asking for the row kAhead tokens ahead hides most of that wait: with 30 layers' pools far
// larger than the caches, a layer of 17 requests of 130-300 tokens went from 218 to 128 us (13 to
// 22 GB/s) on the 2-core AVX-512 VM; with the pool in the cache it takes about 75 us either way
// (benchmarks/results/cpu_prefill_attention.txt has the "after" figures).
constexpr int64_t kAhead = 48;

template <typename T>
inline void prefetch_row(const T* row, int64_t elements) {
    const char* p = reinterpret_cast<const char*>(row);
    for (int64_t offset = 0; offset < elements * static_cast<int64_t>(sizeof(T)); offset += 64)
        __builtin_prefetch(p + offset);
}

// exp(x) for x <= 0 (a softmax subtracts the largest score first) in plain arithmetic, so that
// the compiler vectorises the loop that calls it; libm's expf is a call per element. 2^(x log2 e)
// is split into 2^n (written into the exponent bits) and 2^f for f in [0, 1) (a polynomial):
// relative error below 2e-7, about one fp32 rounding.
inline float exp_nonpositive(float x) {
    x = std::max(x, -87.0f) * 1.44269504f;  // below -87 the result is 0 in fp32 anyway
    const float n = std::floor(x), f = x - n;
    float p = 1.8775767e-3f;
    p = p * f + 8.9893397e-3f;
    p = p * f + 5.5826318e-2f;
    p = p * f + 2.4015361e-1f;
    p = p * f + 6.9315308e-1f;
    p = p * f + 9.9999994e-1f;
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

// Pass 1, any element type and head size: s[g][j] = scale * q_g . k_j, each key converted to
// fp32 once and used by all G query heads. qf and row are the caller's scratch space.
template <typename T, int kDim>
void scores_portable(const T* q, const T* k_cache, int64_t slot_stride, const int32_t* slots,
                     int64_t len, int64_t h, int64_t groups, int64_t runtime_dim, float scale,
                     float* qf, float* row, float* scores) {
    const int64_t head_dim = kDim > 0 ? kDim : runtime_dim;
    for (int64_t i = 0; i < groups * head_dim; ++i) qf[i] = load(q[i]) * scale;
    for (int64_t j = 0; j < len; ++j) {
        if (j + kAhead < len)
            prefetch_row(k_cache + slots[j + kAhead] * slot_stride + h * head_dim, head_dim);
        const T* key = k_cache + slots[j] * slot_stride + h * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) row[d] = load(key[d]);
        for (int64_t g = 0; g < groups; ++g) {
            const float* qg = &qf[g * head_dim];
            float dot = 0.f;
#pragma omp simd reduction(+ : dot)  // lets the compiler add in any order: vectorised
            for (int64_t d = 0; d < head_dim; ++d) dot += qg[d] * row[d];
            scores[g * len + j] = dot;
        }
    }
}

#ifdef MINISGL_DPBF16
// Lane i of the result is the sum of the 16 lanes of v[i]: sixteen horizontal sums in 45
// instructions instead of sixteen separate reductions. Each level adds pairs of half-vectors:
// first within 128-bit chunks (unpack), then the chunks (shuffle_f32x4).
inline __m512 transpose_sum16(const __m512* v) {
    __m512 a[8], b[4];
    for (int i = 0; i < 8; ++i)  // chunk of a[i]: [x0+x2, y0+y2, x1+x3, y1+y3] for x, y = v[2i], v[2i+1]
        a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; ++i) {  // chunk c of b[i]: that chunk's sums of v[4i .. 4i+3]
        const __m512d x = _mm512_castps_pd(a[2 * i]), y = _mm512_castps_pd(a[2 * i + 1]);
        b[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    // chunks 0+1 and 2+3 of b[0], b[1] (then b[2], b[3]), then the two halves: chunk i = b[i]'s
    const __m512 d01 = _mm512_add_ps(_mm512_shuffle_f32x4(b[0], b[1], 0x88),
                                     _mm512_shuffle_f32x4(b[0], b[1], 0xDD));
    const __m512 d23 = _mm512_add_ps(_mm512_shuffle_f32x4(b[2], b[3], 0x88),
                                     _mm512_shuffle_f32x4(b[2], b[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(d01, d23, 0x88),
                         _mm512_shuffle_f32x4(d01, d23, 0xDD));
}

// Pass 1 for bf16 with AVX-512 BF16: vdpbf16ps multiplies 32 bf16 pairs and adds them into 16
// fp32 lanes (products of two bf16 are exact in fp32), so a key of 128 is 4 instructions per
// query head, with no conversion; 16 keys at a time are then reduced together. q stays unscaled
// bf16 (scaling it first would round it again); the scores are scaled after.
template <int kDim>
void scores_dpbf16(const uint16_t* q, const uint16_t* k_cache, int64_t slot_stride,
                   const int32_t* slots, int64_t len, int64_t h, int64_t groups, float scale,
                   float* scores) {
    constexpr int kChunks = kDim / 32;
    const __m512 scaled = _mm512_set1_ps(scale);
    for (int64_t g = 0; g < groups; ++g) {
        __m512bh qg[kChunks];
        for (int c = 0; c < kChunks; ++c)
            qg[c] = (__m512bh)_mm512_loadu_si512(q + g * kDim + 32 * c);
        for (int64_t j0 = 0; j0 < len; j0 += 16) {
            const int n = static_cast<int>(std::min<int64_t>(16, len - j0));
            if (g == 0)  // 16 keys kAhead on; the other query heads find them in the cache
                for (int64_t j = j0 + kAhead; j < std::min(j0 + kAhead + 16, len); ++j)
                    prefetch_row(k_cache + slots[j] * slot_stride + h * kDim, kDim);
            __m512 part[16];
            for (int jj = 0; jj < 16; ++jj) {
                part[jj] = _mm512_setzero_ps();
                if (jj >= n) continue;  // a short last block: zeros, not stored below
                const uint16_t* key = k_cache + slots[j0 + jj] * slot_stride + h * kDim;
                for (int c = 0; c < kChunks; ++c)
                    part[jj] = _mm512_dpbf16_ps(
                        part[jj], qg[c], (__m512bh)_mm512_loadu_si512(key + 32 * c));
            }
            const __m512 s = _mm512_mul_ps(transpose_sum16(part), scaled);
            _mm512_mask_storeu_ps(scores + g * len + j0, static_cast<__mmask16>((1u << n) - 1), s);
        }
    }
}

#endif  // MINISGL_DPBF16

#ifdef MINISGL_AVX512
// Pass 2 with the sums in registers: acc[g] += p[g][j] * v_j for G query heads at once. Written
// generally, the G x D sums live in memory and every key loads and stores them all; with G and D
// fixed at compile time they fit in the 32 vector registers (G * D / 16 of them) and each key
// costs D / 16 loads of V and G * D / 16 multiply-adds. Returns false for shapes it does not
// cover (the caller runs the general loop).
inline __m512 load16(const float* x) { return _mm512_loadu_ps(x); }
inline __m512 load16(const uint16_t* x) {  // 16 bf16 -> 16 fp32: widen, shift into the top half
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))), 16));
}

template <typename T, int kDim, int kGroups>
void values_fixed(const float* p, int64_t len, const T* v_cache, int64_t slot_stride,
                  const int32_t* slots, int64_t h, float* acc) {
    constexpr int kChunks = kDim / 16;
    __m512 sum[kGroups][kChunks];
    for (int g = 0; g < kGroups; ++g)
        for (int c = 0; c < kChunks; ++c) sum[g][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < len; ++j) {
        if (j + kAhead < len)
            prefetch_row(v_cache + slots[j + kAhead] * slot_stride + h * kDim, kDim);
        const T* value = v_cache + slots[j] * slot_stride + h * kDim;
        __m512 row[kChunks];
        for (int c = 0; c < kChunks; ++c) row[c] = load16(value + 16 * c);
        for (int g = 0; g < kGroups; ++g) {
            const __m512 weight = _mm512_set1_ps(p[g * len + j]);
            for (int c = 0; c < kChunks; ++c)
                sum[g][c] = _mm512_fmadd_ps(weight, row[c], sum[g][c]);
        }
    }
    for (int g = 0; g < kGroups; ++g)
        for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(acc + g * kDim + 16 * c, sum[g][c]);
}

template <typename T, int kDim>
bool values_in_registers(const float* p, int64_t len, const T* v_cache, int64_t slot_stride,
                         const int32_t* slots, int64_t h, int64_t groups, float* acc) {
    if constexpr (kDim == 0 || kDim % 16 != 0) {
        return false;
    } else {
        if (groups * kDim > 256) return false;  // G * D / 16 sums: at most 16 of 32 registers
        switch (groups) {
            case 1: values_fixed<T, kDim, 1>(p, len, v_cache, slot_stride, slots, h, acc); break;
            case 2: values_fixed<T, kDim, 2>(p, len, v_cache, slot_stride, slots, h, acc); break;
            case 3: values_fixed<T, kDim, 3>(p, len, v_cache, slot_stride, slots, h, acc); break;
            case 4: values_fixed<T, kDim, 4>(p, len, v_cache, slot_stride, slots, h, acc); break;
            default: return false;
        }
        return true;
    }
}
#endif  // MINISGL_AVX512

// kDim > 0: the head size known when compiling (the common 64 and 128), so that the inner loops
// unroll completely; 0: any head size, read at run time. Returns how many (request, KV head)
// pairs met a slot outside [0, num_slots): those are left unwritten.
template <typename T, int kDim>
int64_t decode_attention(const T* q, const T* k_cache, const T* v_cache, int64_t slot_stride,
                         int64_t num_slots, const int32_t* page_table, int64_t table_stride,
                         const int64_t* table_rows, const int64_t* kv_lens, T* out, int64_t batch,
                         int64_t qo_heads, int64_t kv_heads, int64_t runtime_dim, float scale,
                         int num_threads) {
    const int64_t head_dim = kDim > 0 ? kDim : runtime_dim;
    const int64_t groups = qo_heads / kv_heads;  // query heads per KV head
    int64_t bad = 0;
#pragma omp parallel num_threads(num_threads) reduction(+ : bad)
    {
        // per thread: q in fp32 (scaled), the output sums, one K or V row in fp32, the scores
        std::vector<float> qf(groups * head_dim), acc(groups * head_dim), row(head_dim);
        std::vector<float> total(groups), scores;
#pragma omp for collapse(2) schedule(dynamic)
        for (int64_t b = 0; b < batch; ++b) {
            for (int64_t h = 0; h < kv_heads; ++h) {
                const int64_t len = kv_lens[b];
                const int32_t* slots = page_table + table_rows[b] * table_stride;
                // the engine owns the table, but a wrong slot here would read outside the pool
                if (std::any_of(slots, slots + len,
                                [&](int32_t s) { return s < 0 || s >= num_slots; })) {
                    ++bad;
                    continue;
                }
                const T* qb = q + (b * qo_heads + h * groups) * head_dim;
                scores.resize(groups * len);
#ifdef MINISGL_DPBF16
                if constexpr (std::is_same_v<T, uint16_t> && kDim > 0 && kDim % 32 == 0)
                    scores_dpbf16<kDim>(qb, k_cache, slot_stride, slots, len, h, groups, scale,
                                        scores.data());
                else
#endif
                    scores_portable<T, kDim>(qb, k_cache, slot_stride, slots, len, h, groups,
                                             head_dim, scale, qf.data(), row.data(),
                                             scores.data());
                for (int64_t g = 0; g < groups; ++g) {  // softmax numerators, per query head
                    float* s = &scores[g * len];
                    const float top = *std::max_element(s, s + len);
                    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
                    for (int64_t j = 0; j < len; ++j) {
                        s[j] = exp_nonpositive(s[j] - top);
                        sum += s[j];
                    }
                    total[g] = sum;
                }
                bool summed = false;  // pass 2 done by the register version?
#ifdef MINISGL_AVX512
                summed = values_in_registers<T, kDim>(scores.data(), len, v_cache, slot_stride,
                                                      slots, h, groups, acc.data());
#endif
                if (!summed) {
                    std::fill(acc.begin(), acc.end(), 0.f);
                    for (int64_t j = 0; j < len; ++j) {  // pass 2: every value once
                        if (j + kAhead < len)
                            prefetch_row(v_cache + slots[j + kAhead] * slot_stride + h * head_dim,
                                         head_dim);
                        const T* value = v_cache + slots[j] * slot_stride + h * head_dim;
                        for (int64_t d = 0; d < head_dim; ++d) row[d] = load(value[d]);
                        for (int64_t g = 0; g < groups; ++g) {
                            const float p = scores[g * len + j];
                            float* a = &acc[g * head_dim];
                            for (int64_t d = 0; d < head_dim; ++d) a[d] += p * row[d];
                        }
                    }
                }
                T* ob = out + (b * qo_heads + h * groups) * head_dim;
                for (int64_t g = 0; g < groups; ++g)
                    for (int64_t d = 0; d < head_dim; ++d)
                        store(acc[g * head_dim + d] / total[g], ob + g * head_dim + d);
            }
        }
    }
    return bad;
}

template <typename T>
int64_t decode_attention_any_dim(const T* q, const T* k_cache, const T* v_cache,
                                 int64_t slot_stride, int64_t num_slots, const int32_t* page_table,
                                 int64_t table_stride, const int64_t* table_rows,
                                 const int64_t* kv_lens, T* out, int64_t batch, int64_t qo_heads,
                                 int64_t kv_heads, int64_t head_dim, float scale, int num_threads) {
    auto run = head_dim == 64    ? decode_attention<T, 64>
               : head_dim == 128 ? decode_attention<T, 128>
                                 : decode_attention<T, 0>;
    return run(q, k_cache, v_cache, slot_stride, num_slots, page_table, table_stride, table_rows,
               kv_lens, out, batch, qo_heads, kv_heads, head_dim, scale, num_threads);
}

}  // namespace

// The entry points, one per element type (bf16 travels as its bits, uint16_t).
extern "C" {
int64_t minisgl_cpu_decode_attention_f32(const float* q, const float* k_cache,
                                         const float* v_cache, int64_t slot_stride,
                                         int64_t num_slots, const int32_t* page_table,
                                         int64_t table_stride, const int64_t* table_rows,
                                         const int64_t* kv_lens, float* out, int64_t batch,
                                         int64_t qo_heads, int64_t kv_heads, int64_t head_dim,
                                         float scale, int num_threads) {
    return decode_attention_any_dim(q, k_cache, v_cache, slot_stride, num_slots, page_table,
                                    table_stride, table_rows, kv_lens, out, batch, qo_heads,
                                    kv_heads, head_dim, scale, num_threads);
}

int64_t minisgl_cpu_decode_attention_bf16(const uint16_t* q, const uint16_t* k_cache,
                                          const uint16_t* v_cache, int64_t slot_stride,
                                          int64_t num_slots, const int32_t* page_table,
                                          int64_t table_stride, const int64_t* table_rows,
                                          const int64_t* kv_lens, uint16_t* out, int64_t batch,
                                          int64_t qo_heads, int64_t kv_heads, int64_t head_dim,
                                          float scale, int num_threads) {
    return decode_attention_any_dim(q, k_cache, v_cache, slot_stride, num_slots, page_table,
                                    table_stride, table_rows, kv_lens, out, batch, qo_heads,
                                    kv_heads, head_dim, scale, num_threads);
}

// 1 where the bf16 scores use vdpbf16ps (built with AVX-512 BF16): Python asks before it sends a
// bf16 prefill here (attention/cpu.py), since the portable loop is slower than SDPA there.
int minisgl_cpu_attention_has_dpbf16() {
#ifdef MINISGL_DPBF16
    return 1;
#else
    return 0;
#endif
}
}
