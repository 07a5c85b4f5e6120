// Atomics: a 64-bin histogram (block-scoped atomics in shared memory, then device-wide ones), and
// every atomic operation on every type CUDA provides it for. All final values are independent of
// the order in which threads get there; atomicExch is checked by the fact that the returned old
// values plus the final value are a permutation of the initial value plus all exchanged values.
#include <algorithm>
#include <cstdio>
#include <vector>
#include "check.cuh"

constexpr int N = 10000;
constexpr int BINS = 64;

__global__ void histogram(const int* values, int n, unsigned* bins) {
    __shared__ unsigned local[BINS];
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd_block(&local[values[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) atomicAdd(&bins[b], local[b]);
}

struct Counters {
    int add_i, sub_i, min_i, max_i, or_i, xor_i, and_i, exch_i, cas_i;
    unsigned add_u, sub_u, min_u, max_u, inc_u, dec_u, and_u, or_u, xor_u, exch_u, cas_u;
    unsigned long long add_ull, min_ull, max_ull, and_ull, or_ull, xor_ull, exch_ull, cas_ull;
    long long min_ll, max_ll;
    float add_f, exch_f;
    double add_d;
};

__global__ void atomic_suite(Counters* c, int* exch_old, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned ui = static_cast<unsigned>(i);
    atomicAdd(&c->add_i, (i % 7) - 3);
    atomicSub(&c->sub_i, 3);
    atomicMin(&c->min_i, 5000 - i);
    atomicMax(&c->max_i, (i * 31) % 9973 - 4000);
    atomicOr(&c->or_i, 1 << (i % 31));
    atomicXor(&c->xor_i, 1 << (i % 29));
    atomicAnd(&c->and_i, ~(1 << (i % 13)));
    exch_old[i] = atomicExch(&c->exch_i, i);

    atomicAdd(&c->add_u, ui * 3u);
    atomicSub(&c->sub_u, 1u);
    atomicMin(&c->min_u, ui + 17u);
    atomicMax(&c->max_u, ui ^ 0x5555u);
    atomicInc(&c->inc_u, 16u);
    atomicDec(&c->dec_u, 16u);
    atomicAnd(&c->and_u, ~(1u << (i % 20)));
    atomicOr(&c->or_u, 1u << (i % 32));
    atomicXor(&c->xor_u, ui);
    atomicExch(&c->exch_u, 7u);

    atomicAdd(&c->add_ull, (1ull << 33) + ui);
    atomicMin(&c->min_ull, 0xffffffffffull - ui);
    atomicMax(&c->max_ull, (static_cast<unsigned long long>(ui) << 30));
    atomicAnd(&c->and_ull, ~(1ull << (i % 50)));
    atomicOr(&c->or_ull, 1ull << (i % 64));
    atomicXor(&c->xor_ull, 1ull << (i % 64));
    atomicExch(&c->exch_ull, 42ull);
    atomicMin(&c->min_ll, -1000000000000ll + i);
    atomicMax(&c->max_ll, -1000000000000ll + i);

    atomicAdd(&c->add_f, 0.5f);
    atomicExch(&c->exch_f, 2.5f);
    atomicAdd(&c->add_d, 0.25);

    if (i < 100) {  // multiply through compare-and-swap loops (multiplication commutes)
        int old = c->cas_i, assumed;
        do {
            assumed = old;
            old = atomicCAS(&c->cas_i, assumed, static_cast<int>(static_cast<unsigned>(assumed) * (2u * ui + 1u)));
        } while (old != assumed);
        unsigned uold = c->cas_u, uassumed;
        do {
            uassumed = uold;
            uold = atomicCAS(&c->cas_u, uassumed, uassumed * (2u * ui + 1u));
        } while (uold != uassumed);
        unsigned long long lold = c->cas_ull, lassumed;
        do {
            lassumed = lold;
            lold = atomicCAS(&c->cas_ull, lassumed, lassumed * (2ull * ui + 1ull));
        } while (lold != lassumed);
    }
}

int main() {
    Checker check("atomics");

    std::vector<int> values(N);
    for (int i = 0; i < N; ++i) values[i] = static_cast<int>((i * 7919L) % BINS);
    int* d_values;
    unsigned* d_bins;
    CUDA_CHECK(cudaMalloc(&d_values, N * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_bins, BINS * sizeof(unsigned)));
    CUDA_CHECK(cudaMemcpy(d_values, values.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_bins, 0, BINS * sizeof(unsigned)));
    histogram<<<8, 128>>>(d_values, N, d_bins);
    CUDA_CHECK(cudaGetLastError());
    unsigned bins[BINS];
    CUDA_CHECK(cudaMemcpy(bins, d_bins, sizeof(bins), cudaMemcpyDeviceToHost));
    unsigned want_bins[BINS] = {};
    for (int v : values) ++want_bins[v];
    unsigned total = 0;
    for (int b = 0; b < BINS; ++b) {
        check.expect_eq(bins[b], want_bins[b], "histogram bin");
        total += bins[b];
    }
    printf("histogram: total %u, bins[0..7] = %u %u %u %u %u %u %u %u, bins[63] = %u\n", total, bins[0], bins[1],
           bins[2], bins[3], bins[4], bins[5], bins[6], bins[7], bins[63]);

    Counters init = {};
    init.min_i = 1 << 30; init.max_i = -(1 << 30); init.and_i = -1; init.exch_i = -1; init.cas_i = 1;
    init.min_u = ~0u; init.and_u = ~0u; init.cas_u = 1;
    init.min_ull = ~0ull; init.and_ull = ~0ull; init.cas_ull = 1;
    init.min_ll = 1ll << 62; init.max_ll = -(1ll << 62);
    Counters* d_c;
    int* d_old;
    CUDA_CHECK(cudaMalloc(&d_c, sizeof(Counters)));
    CUDA_CHECK(cudaMalloc(&d_old, N * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_c, &init, sizeof(init), cudaMemcpyHostToDevice));
    atomic_suite<<<(N + 255) / 256, 256>>>(d_c, d_old, N);
    CUDA_CHECK(cudaGetLastError());
    Counters c;
    std::vector<int> olds(N);
    CUDA_CHECK(cudaMemcpy(&c, d_c, sizeof(c), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(olds.data(), d_old, N * sizeof(int), cudaMemcpyDeviceToHost));

    // The CPU reference applies the same updates in index order.
    Counters w = init;
    for (int i = 0; i < N; ++i) {
        unsigned ui = static_cast<unsigned>(i);
        w.add_i += (i % 7) - 3; w.sub_i -= 3; w.min_i = std::min(w.min_i, 5000 - i);
        w.max_i = std::max(w.max_i, (i * 31) % 9973 - 4000); w.or_i |= 1 << (i % 31);
        w.xor_i ^= 1 << (i % 29); w.and_i &= ~(1 << (i % 13)); w.exch_i = i;
        w.add_u += ui * 3u; w.sub_u -= 1u; w.min_u = std::min(w.min_u, ui + 17u);
        w.max_u = std::max(w.max_u, ui ^ 0x5555u); w.inc_u = w.inc_u >= 16u ? 0u : w.inc_u + 1u;
        w.dec_u = (w.dec_u == 0u || w.dec_u > 16u) ? 16u : w.dec_u - 1u;
        w.and_u &= ~(1u << (i % 20)); w.or_u |= 1u << (i % 32); w.xor_u ^= ui; w.exch_u = 7u;
        w.add_ull += (1ull << 33) + ui; w.min_ull = std::min(w.min_ull, 0xffffffffffull - ui);
        w.max_ull = std::max(w.max_ull, static_cast<unsigned long long>(ui) << 30);
        w.and_ull &= ~(1ull << (i % 50)); w.or_ull |= 1ull << (i % 64); w.xor_ull ^= 1ull << (i % 64);
        w.exch_ull = 42ull; w.min_ll = std::min(w.min_ll, -1000000000000ll + i);
        w.max_ll = std::max(w.max_ll, -1000000000000ll + i);
        w.add_f += 0.5f; w.exch_f = 2.5f; w.add_d += 0.25;
        if (i < 100) { w.cas_i = static_cast<int>(static_cast<unsigned>(w.cas_i) * (2u * ui + 1u)); w.cas_u *= 2u * ui + 1u; w.cas_ull *= 2ull * ui + 1ull; }
    }
    struct Row { const char* name; long long got, want; };
    const Row rows[] = {
        {"atomicAdd int", c.add_i, w.add_i}, {"atomicSub int", c.sub_i, w.sub_i},
        {"atomicMin int", c.min_i, w.min_i}, {"atomicMax int", c.max_i, w.max_i},
        {"atomicOr int", c.or_i, w.or_i}, {"atomicXor int", c.xor_i, w.xor_i},
        {"atomicAnd int", c.and_i, w.and_i}, {"atomicCAS int (product)", c.cas_i, w.cas_i},
        {"atomicAdd unsigned", c.add_u, w.add_u}, {"atomicSub unsigned", c.sub_u, w.sub_u},
        {"atomicMin unsigned", c.min_u, w.min_u}, {"atomicMax unsigned", c.max_u, w.max_u},
        {"atomicInc unsigned", c.inc_u, w.inc_u}, {"atomicDec unsigned", c.dec_u, w.dec_u},
        {"atomicAnd unsigned", c.and_u, w.and_u}, {"atomicOr unsigned", c.or_u, w.or_u},
        {"atomicXor unsigned", c.xor_u, w.xor_u}, {"atomicExch unsigned", c.exch_u, w.exch_u},
        {"atomicCAS unsigned (product)", c.cas_u, w.cas_u},
        {"atomicAdd ull", static_cast<long long>(c.add_ull), static_cast<long long>(w.add_ull)},
        {"atomicMin ull", static_cast<long long>(c.min_ull), static_cast<long long>(w.min_ull)},
        {"atomicMax ull", static_cast<long long>(c.max_ull), static_cast<long long>(w.max_ull)},
        {"atomicAnd ull", static_cast<long long>(c.and_ull), static_cast<long long>(w.and_ull)},
        {"atomicOr ull", static_cast<long long>(c.or_ull), static_cast<long long>(w.or_ull)},
        {"atomicXor ull", static_cast<long long>(c.xor_ull), static_cast<long long>(w.xor_ull)},
        {"atomicExch ull", static_cast<long long>(c.exch_ull), static_cast<long long>(w.exch_ull)},
        {"atomicCAS ull (product)", static_cast<long long>(c.cas_ull), static_cast<long long>(w.cas_ull)},
        {"atomicMin long long", c.min_ll, w.min_ll}, {"atomicMax long long", c.max_ll, w.max_ll},
    };
    for (const Row& r : rows) {
        check.expect_eq(r.got, r.want, r.name);
        printf("%-29s %lld (0x%llx)\n", r.name, r.got, static_cast<unsigned long long>(r.got));
    }
    check.expect(c.add_f == w.add_f, "atomicAdd float");
    check.expect(c.exch_f == 2.5f, "atomicExch float");
    check.expect(c.add_d == w.add_d, "atomicAdd double");
    printf("atomicAdd float %.2f, atomicExch float %.2f, atomicAdd double %.2f\n", c.add_f, c.exch_f, c.add_d);

    // atomicExch: {olds} + {final} must be {initial} + {0..N-1}.
    olds.push_back(c.exch_i);
    std::sort(olds.begin(), olds.end());
    bool permutation = olds[0] == -1;
    for (int i = 0; i < N; ++i) permutation = permutation && olds[i + 1] == i;
    check.expect(permutation, "atomicExch int returns a permutation");
    printf("atomicExch int: old values and the final value form a permutation: %s\n", permutation ? "yes" : "no");
    return check.finish();
}
