// Warp votes and friends on a block of 48 threads, so that the second warp is partial (16 lanes):
// __activemask() (converged and inside a branch), __ballot_sync, __any_sync, __all_sync with full
// and partial masks, __syncwarp, __match_any_sync/__match_all_sync and __reduce_*_sync.
#include <cstdio>
#include "check.cuh"

constexpr int THREADS = 48;
constexpr int FIELDS = 14;
const char* const kNames[FIELDS] = {
    "activemask", "ballot_mod3", "any_lane7", "all_nonneg", "all_lt20", "branch_mask",
    "half_ballot", "match_any_div5", "match_all_const", "match_all_pred", "match_all_diff",
    "reduce_add", "reduce_min", "reduce_max_and_or"};

__global__ void votes(unsigned* out) {
    __shared__ int scratch[THREADS];
    unsigned lane = threadIdx.x % 32;
    auto put = [&](int field, unsigned value) { out[field * THREADS + threadIdx.x] = value; };

    unsigned active = __activemask();  // all lanes of the warp that exist
    put(0, active);
    put(1, __ballot_sync(active, lane % 3 == 0));
    put(2, __any_sync(active, lane == 7));
    put(3, __all_sync(active, lane < 32));
    put(4, __all_sync(active, lane < 20));
    unsigned branch = 0;
    if (lane % 4 == 1) branch = __activemask();  // only the lanes that took the branch
    put(5, branch);
    unsigned half = 0;
    if (lane < 16) half = __ballot_sync(0x0000ffffu, lane & 1);
    put(6, half);
    put(7, __match_any_sync(active, lane / 5));
    int pred = -1;
    put(8, __match_all_sync(active, 7u, &pred));
    put(9, static_cast<unsigned>(pred));
    int pred2 = -1;
    unsigned diff = __match_all_sync(active, lane < 8, &pred2);
    put(10, diff * 2u + static_cast<unsigned>(pred2));
    put(11, __reduce_add_sync(active, lane));
    put(12, static_cast<unsigned>(__reduce_min_sync(active, static_cast<int>(lane) - 10)));
    put(13, __reduce_max_sync(active, lane * 3u) ^ (__reduce_and_sync(active, lane | 64u) << 8) ^
                (__reduce_or_sync(active, 1u << lane) << 1));

    // __syncwarp orders the shared-memory writes of a warp before its reads.
    scratch[threadIdx.x] = static_cast<int>(lane * lane);
    __syncwarp(active);
    int partner = (threadIdx.x ^ 1) < THREADS ? (threadIdx.x ^ 1) : threadIdx.x;
    out[FIELDS * THREADS + threadIdx.x] = static_cast<unsigned>(scratch[partner]);
}

int main() {
    Checker check("warp_vote");
    unsigned* d_out;
    const int words = (FIELDS + 1) * THREADS;
    CUDA_CHECK(cudaMalloc(&d_out, words * sizeof(unsigned)));
    votes<<<1, THREADS>>>(d_out);
    CUDA_CHECK(cudaGetLastError());
    static unsigned got[FIELDS + 1][THREADS];
    CUDA_CHECK(cudaMemcpy(got, d_out, sizeof(got), cudaMemcpyDeviceToHost));

    for (int w = 0; w < 2; ++w) {
        int lanes = w == 0 ? 32 : THREADS - 32;
        unsigned active = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        unsigned mod3 = 0, branch = 0, half = 0, or_bits = 0, and_bits = ~0u;
        int add = 0, mx = 0;
        for (int l = 0; l < lanes; ++l) {
            if (l % 3 == 0) mod3 |= 1u << l;
            if (l % 4 == 1) branch |= 1u << l;
            if (l < 16 && (l & 1)) half |= 1u << l;
            or_bits |= 1u << l;
            and_bits &= static_cast<unsigned>(l) | 64u;
            add += l;
            mx = l * 3 > mx ? l * 3 : mx;
        }
        for (int l = 0; l < lanes; ++l) {
            int t = 32 * w + l;
            unsigned div5 = 0;
            for (int k = 0; k < lanes; ++k)
                if (k / 5 == l / 5) div5 |= 1u << k;
            unsigned want[FIELDS + 1] = {
                active, mod3, 1u, 1u, lanes <= 20 ? 1u : 0u, (l % 4 == 1) ? branch : 0u,
                l < 16 ? half : 0u, div5, active, 1u, 0u, static_cast<unsigned>(add),
                static_cast<unsigned>(-10), static_cast<unsigned>(mx) ^ (and_bits << 8) ^ (or_bits << 1),
                static_cast<unsigned>((l ^ 1) < lanes ? (l ^ 1) * (l ^ 1) : l * l)};
            for (int f = 0; f <= FIELDS; ++f)
                check.expect_eq(got[f][t], want[f], f < FIELDS ? kNames[f] : "syncwarp");
        }
    }
    for (int f = 0; f < FIELDS; ++f) {
        printf("%-17s lane 0 0x%08x lane 5 0x%08x | warp 1 lane 0 0x%08x lane 13 0x%08x\n", kNames[f],
               got[f][0], got[f][5], got[f][32], got[f][45]);
    }
    printf("syncwarp          partner squares:");
    for (int t = 0; t < THREADS; t += 7) printf(" %u", got[FIELDS][t]);
    printf("\n");
    return check.finish();
}
