// Warp shuffles: butterfly and tree reductions, inclusive scans (full warp and width 8), the
// width argument of every shuffle flavour, out-of-range lanes, and 64-bit and float payloads.
// The CPU reference follows the CUDA programming guide's description of each shuffle.
#include <cstdio>
#include <cstring>
#include "check.cuh"

constexpr unsigned FULL = 0xffffffffu;
constexpr int THREADS = 64;
constexpr int KINDS = 12;
const char* const kNames[KINDS] = {"xor_sum",     "down_sum",     "scan_w32",     "scan_w8",
                                   "down4_w16",   "idx35",        "idx5_w8",      "xor8_w8",
                                   "up0",         "idx_minus1",   "down3_w4",     "up2_w16"};

__global__ void int_shuffles(const int* in, int* out) {
    int lane = threadIdx.x % 32;
    int v = in[threadIdx.x];
    int r;
    auto put = [&](int kind, int value) { out[kind * THREADS + threadIdx.x] = value; };

    r = v;  // butterfly: every lane ends with the warp's sum
    for (int m = 16; m > 0; m /= 2) r += __shfl_xor_sync(FULL, r, m);
    put(0, r);
    r = v;  // tree: lane 0 ends with the sum, the others with partial sums
    for (int d = 16; d > 0; d /= 2) r += __shfl_down_sync(FULL, r, d);
    put(1, r);
    r = v;  // Hillis-Steele inclusive scan
    for (int d = 1; d < 32; d *= 2) {
        int up = __shfl_up_sync(FULL, r, d);
        if (lane >= d) r += up;
    }
    put(2, r);
    r = v;  // the same scan in independent segments of 8 lanes
    for (int d = 1; d < 8; d *= 2) {
        int up = __shfl_up_sync(FULL, r, d, 8);
        if (lane % 8 >= d) r += up;
    }
    put(3, r);
    put(4, __shfl_down_sync(FULL, v, 4, 16));
    put(5, __shfl_sync(FULL, v, 35));      // source lane 35 wraps to 3
    put(6, __shfl_sync(FULL, v, 5, 8));    // lane 5 of each segment of 8
    put(7, __shfl_xor_sync(FULL, v, 8, 8));  // may read an earlier segment, never a later one
    put(8, __shfl_up_sync(FULL, v, 0));
    put(9, __shfl_sync(FULL, v, -1));      // -1 wraps to lane 31
    put(10, __shfl_down_sync(FULL, v, 3, 4));
    put(11, __shfl_up_sync(FULL, v, 2, 16));
}

__global__ void wide_shuffles(const int* in, double* out_d, long long* out_ll, float* out_f) {
    int lane = threadIdx.x % 32;
    int v = in[threadIdx.x];
    double d = v + 0.25;
    for (int m = 1; m < 32; m *= 2) d += __shfl_xor_sync(FULL, d, m);
    out_d[threadIdx.x] = d;
    long long big = (1LL << 40) * (lane % 3) + v;
    out_ll[threadIdx.x] = __shfl_up_sync(FULL, big, 1);
    float f = 0.5f * v;
    for (int m = 16; m > 0; m /= 2) f += __shfl_down_sync(FULL, f, m, 32);
    out_f[threadIdx.x] = f;
}

// ---- CPU reference, from the documented semantics --------------------------------------------
static int src_up(int l, int d, int w) { return (l % w) >= d ? l - d : l; }
static int src_down(int l, int d, int w) { return (l % w) + d < w ? l + d : l; }
static int src_xor(int l, int m, int w) { int s = l ^ m; return (s / w) <= (l / w) ? s : l; }
static int src_idx(int l, int s, int w) { return (l / w) * w + (((s % w) + w) % w); }

// One shuffle step over a 32-lane warp: dst[l] = src[pick(l)].
template <class T, class F>
static void step(const T* src, T* dst, F pick) {
    for (int l = 0; l < 32; ++l) dst[l] = src[pick(l)];
}

static void reference(const int* in, int (*want)[THREADS]) {
    for (int w = 0; w < THREADS / 32; ++w) {
        const int* v = in + 32 * w;
        int r[32], s[32];
        auto put = [&](int kind, const int* vals) { memcpy(&want[kind][32 * w], vals, sizeof(int) * 32); };
        memcpy(r, v, sizeof(r));
        for (int m = 16; m > 0; m /= 2) {
            step(r, s, [&](int l) { return src_xor(l, m, 32); });
            for (int l = 0; l < 32; ++l) r[l] += s[l];
        }
        put(0, r);
        memcpy(r, v, sizeof(r));
        for (int d = 16; d > 0; d /= 2) {
            step(r, s, [&](int l) { return src_down(l, d, 32); });
            for (int l = 0; l < 32; ++l) r[l] += s[l];
        }
        put(1, r);
        for (int width : {32, 8}) {
            memcpy(r, v, sizeof(r));
            for (int d = 1; d < width; d *= 2) {
                step(r, s, [&](int l) { return src_up(l, d, width); });
                for (int l = 0; l < 32; ++l)
                    if (l % width >= d) r[l] += s[l];
            }
            put(width == 32 ? 2 : 3, r);
        }
        step(v, s, [](int l) { return src_down(l, 4, 16); });  put(4, s);
        step(v, s, [](int l) { return src_idx(l, 35, 32); });  put(5, s);
        step(v, s, [](int l) { return src_idx(l, 5, 8); });    put(6, s);
        step(v, s, [](int l) { return src_xor(l, 8, 8); });    put(7, s);
        step(v, s, [](int l) { return src_up(l, 0, 32); });    put(8, s);
        step(v, s, [](int l) { return src_idx(l, -1, 32); });  put(9, s);
        step(v, s, [](int l) { return src_down(l, 3, 4); });   put(10, s);
        step(v, s, [](int l) { return src_up(l, 2, 16); });    put(11, s);
    }
}

int main() {
    Checker check("warp_shuffle");
    int in[THREADS];
    for (int i = 0; i < THREADS; ++i) in[i] = (i * 37) % 101;
    int *d_in, *d_out;
    CUDA_CHECK(cudaMalloc(&d_in, sizeof(in)));
    CUDA_CHECK(cudaMalloc(&d_out, KINDS * THREADS * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_in, in, sizeof(in), cudaMemcpyHostToDevice));
    int_shuffles<<<1, THREADS>>>(d_in, d_out);
    CUDA_CHECK(cudaGetLastError());
    static int got[KINDS][THREADS], want[KINDS][THREADS];
    CUDA_CHECK(cudaMemcpy(got, d_out, sizeof(got), cudaMemcpyDeviceToHost));
    reference(in, want);
    for (int k = 0; k < KINDS; ++k) {
        for (int w = 0; w < THREADS / 32; ++w) {
            printf("%-10s warp %d:", kNames[k], w);
            for (int l = 0; l < 32; ++l) printf(" %d", got[k][32 * w + l]);
            printf("\n");
        }
        for (int i = 0; i < THREADS; ++i) check.expect_eq(got[k][i], want[k][i], kNames[k]);
    }

    double* d_d;
    long long* d_ll;
    float* d_f;
    CUDA_CHECK(cudaMalloc(&d_d, THREADS * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&d_ll, THREADS * sizeof(long long)));
    CUDA_CHECK(cudaMalloc(&d_f, THREADS * sizeof(float)));
    wide_shuffles<<<1, THREADS>>>(d_in, d_d, d_ll, d_f);
    CUDA_CHECK(cudaGetLastError());
    double dd[THREADS];
    long long ll[THREADS];
    float ff[THREADS];
    CUDA_CHECK(cudaMemcpy(dd, d_d, sizeof(dd), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(ll, d_ll, sizeof(ll), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(ff, d_f, sizeof(ff), cudaMemcpyDeviceToHost));
    for (int w = 0; w < THREADS / 32; ++w) {
        double sum = 0;
        for (int l = 0; l < 32; ++l) sum += in[32 * w + l] + 0.25;
        for (int l = 0; l < 32; ++l) check.expect(dd[32 * w + l] == sum, "double xor sum");
        for (int l = 0; l < 32; ++l) {
            int src = src_up(l, 1, 32);
            long long want_ll = (1LL << 40) * (src % 3) + in[32 * w + src];
            check.expect_eq(ll[32 * w + l], want_ll, "long long shfl_up");
        }
        float fsum = 0;
        for (int l = 0; l < 32; ++l) fsum += 0.5f * in[32 * w + l];
        check.expect(ff[32 * w] == fsum, "float shfl_down sum");
        printf("wide warp %d: double sum %.2f, long long lanes 0-2 %lld %lld %lld lane 31 %lld, float sum %.1f\n", w,
               dd[32 * w], ll[32 * w], ll[32 * w + 1], ll[32 * w + 2], ll[32 * w + 31], ff[32 * w]);
    }
    return check.finish();
}
