// Block reductions through static shared memory: a templated tree reduction for three block
// sizes (one launched through a function pointer), two arrays declared in one statement, a
// shared scalar, and the __syncthreads_count/_and/_or barriers.
#include <cstdio>
#include <vector>
#include "check.cuh"

template <int BLOCK>
__global__ void block_sum(const int* in, int* out, int n) {
    __shared__ int partial[BLOCK];
    int t = threadIdx.x;
    int i = blockIdx.x * BLOCK + t;
    partial[t] = i < n ? in[i] : 0;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (t < stride) partial[t] += partial[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = partial[0];
}

// Min and max at once, two shared arrays declared together, and a shared scalar that thread 0
// writes and every thread reads after the barrier.
__global__ void block_min_max(const int* in, int* out_min, int* out_max, int* out_spread) {
    __shared__ int lo[128], hi[128];
    __shared__ int spread;
    int t = threadIdx.x;
    int v = in[blockIdx.x * 128 + t];
    lo[t] = v;
    hi[t] = v;
    __syncthreads();
    for (int stride = 64; stride > 0; stride >>= 1) {
        if (t < stride) {
            lo[t] = min(lo[t], lo[t + stride]);
            hi[t] = max(hi[t], hi[t + stride]);
        }
        __syncthreads();
    }
    if (t == 0) spread = hi[0] - lo[0];
    __syncthreads();
    if (t == 0) {
        out_min[blockIdx.x] = lo[0];
        out_max[blockIdx.x] = hi[0];
    }
    out_spread[blockIdx.x * 128 + t] = spread;  // every thread sees thread 0's write
}

__global__ void barrier_votes(const int* in, int* out) {
    int v = in[blockIdx.x * blockDim.x + threadIdx.x];
    int positive = __syncthreads_count(v > 0);
    int all_small = __syncthreads_and(v < 50);
    int any_seven = __syncthreads_or(v == 7);
    if (threadIdx.x == 0) {
        out[3 * blockIdx.x + 0] = positive;
        out[3 * blockIdx.x + 1] = all_small;
        out[3 * blockIdx.x + 2] = any_seven;
    }
}

static int value_at(int i) { return (i * 37) % 101 - 50; }

template <int BLOCK>
static void check_sum(Checker& check, const int* d_in, int n, bool through_pointer) {
    int blocks = (n + BLOCK - 1) / BLOCK;
    int* d_out;
    CUDA_CHECK(cudaMalloc(&d_out, blocks * sizeof(int)));
    if (through_pointer) {
        void (*kernel)(const int*, int*, int) = block_sum<BLOCK>;
        kernel<<<blocks, BLOCK>>>(d_in, d_out, n);
    } else {
        block_sum<BLOCK><<<blocks, BLOCK>>>(d_in, d_out, n);
    }
    CUDA_CHECK(cudaGetLastError());
    std::vector<int> out(blocks);
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    long long total = 0;
    for (int b = 0; b < blocks; ++b) {
        int want = 0;
        for (int i = b * BLOCK; i < n && i < (b + 1) * BLOCK; ++i) want += value_at(i);
        check.expect_eq(out[b], want, "block sum");
        total += out[b];
    }
    printf("block_sum<%d>: %d blocks, first sums %d %d %d, last %d, total %lld\n", BLOCK, blocks,
           out[0], out[1], out[2], out[blocks - 1], total);
    CUDA_CHECK(cudaFree(d_out));
}

int main() {
    Checker check("block_reduce");
    const int n = 5000;
    std::vector<int> h(n);
    for (int i = 0; i < n; ++i) h[i] = value_at(i);
    int* d_in;
    CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));

    check_sum<64>(check, d_in, n, false);
    check_sum<256>(check, d_in, n, true);
    check_sum<1024>(check, d_in, n, false);

    const int blocks = 4;  // 4 x 128 values
    int *d_min, *d_max, *d_spread;
    CUDA_CHECK(cudaMalloc(&d_min, blocks * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_max, blocks * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_spread, blocks * 128 * sizeof(int)));
    block_min_max<<<blocks, 128>>>(d_in, d_min, d_max, d_spread);
    CUDA_CHECK(cudaGetLastError());
    int mn[blocks], mx[blocks];
    std::vector<int> spread(blocks * 128);
    CUDA_CHECK(cudaMemcpy(mn, d_min, sizeof(mn), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(mx, d_max, sizeof(mx), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(spread.data(), d_spread, spread.size() * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; ++b) {
        int lo = 1000, hi = -1000;
        for (int i = b * 128; i < (b + 1) * 128; ++i) {
            lo = h[i] < lo ? h[i] : lo;
            hi = h[i] > hi ? h[i] : hi;
        }
        check.expect_eq(mn[b], lo, "block min");
        check.expect_eq(mx[b], hi, "block max");
        for (int t = 0; t < 128; ++t) check.expect_eq(spread[b * 128 + t], hi - lo, "shared scalar");
        printf("block_min_max block %d: min %d max %d spread %d\n", b, mn[b], mx[b], spread[b * 128]);
    }

    int* d_votes;
    CUDA_CHECK(cudaMalloc(&d_votes, 3 * blocks * sizeof(int)));
    barrier_votes<<<blocks, 96>>>(d_in, d_votes);
    CUDA_CHECK(cudaGetLastError());
    int votes[3 * blocks];
    CUDA_CHECK(cudaMemcpy(votes, d_votes, sizeof(votes), cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; ++b) {
        int positive = 0, all_small = 1, any_seven = 0;
        for (int i = b * 96; i < (b + 1) * 96; ++i) {
            positive += h[i] > 0;
            all_small &= h[i] < 50;
            any_seven |= h[i] == 7;
        }
        check.expect_eq(votes[3 * b], positive, "__syncthreads_count");
        check.expect_eq(votes[3 * b + 1] != 0, all_small, "__syncthreads_and");
        check.expect_eq(votes[3 * b + 2] != 0, any_seven, "__syncthreads_or");
        printf("barrier_votes block %d: count(v>0) %d, and(v<50) %d, or(v==7) %d\n", b, votes[3 * b],
               votes[3 * b + 1] != 0, votes[3 * b + 2] != 0);
    }
    CUDA_CHECK(cudaFree(d_in));
    return check.finish();
}
