// Two memory-bound kernels of minisgl: writing new K/V rows into the paged KV pool
// (store_kv_kernel) and the vocabulary-parallel embedding lookup (embedding_kernel).
// Both only move whole rows to or from indexed positions, so their speed is set by memory
// bandwidth. Each row is handled by a warp (or, for long rows, by several warps), whose 32 lanes
// copy neighbouring elements so that every memory transaction is fully coalesced. The
// element type V is picked by the host: uint4 (16 bytes per lane per step) when every row start
// is 16-byte aligned, otherwise a 4- or 2-byte type.
#pragma once
#include <cstdint>

namespace minisgl {

constexpr int kWarpSize = 32;

// One warp copies one row of `row` elements: each lane issues kUnroll loads before its first
// store, so several memory requests per lane are in flight (the copy is latency-bound otherwise).
template <typename V, int kUnroll = 4>
__device__ __forceinline__ void copy_row(V* __restrict__ dst, const V* __restrict__ src,
                                         int64_t row, int lane) {
  for (int64_t base = 0; base < row; base += kUnroll * kWarpSize) {
    V buf[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t i = base + lane + j * kWarpSize;
      if (i < row) buf[j] = src[i];
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int64_t i = base + lane + j * kWarpSize;
      if (i < row) dst[i] = buf[j];
    }
  }
}

// Copies k[i] -> k_cache[indices[i]] and v[i] -> v_cache[indices[i]] for i in [0, n), with two
// warps per token (even warps copy the K row, odd warps the V row): launch 2 * n warps.
// row: elements of type V per row; *_stride: distance between rows, in elements of type V
// (k and v may be views into a fused qkv tensor, with strides of their own).
template <typename V>
__global__ void store_kv_kernel(V* __restrict__ k_cache, V* __restrict__ v_cache,
                                const int32_t* __restrict__ indices, const V* __restrict__ k,
                                const V* __restrict__ v, int64_t n, int64_t row,
                                int64_t cache_stride, int64_t k_stride, int64_t v_stride) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  const int64_t token = warp / 2;
  if (token >= n) return;  // whole warps leave together: no warp-level collective follows
  const bool is_v = warp % 2 == 1;
  V* dst = (is_v ? v_cache : k_cache) + static_cast<int64_t>(indices[token]) * cache_stride;
  const V* src = is_v ? v + token * v_stride : k + token * k_stride;
  copy_row(dst, src, row, static_cast<int>(threadIdx.x % kWarpSize));
}

// out[t] = weight[ids[t] - start] when start <= ids[t] < start + length, else a row of zeros
// (this rank does not own that token; the all-reduce across ranks fills it in).
// `splits` warps share one row: warp w copies part (w % splits) of row (w / splits).
template <typename V>
__global__ void embedding_kernel(V* __restrict__ out, const V* __restrict__ weight,
                                 const int32_t* __restrict__ ids, int64_t n, int64_t row,
                                 int64_t start, int64_t length, int splits) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  const int64_t token = warp / splits;
  if (token >= n) return;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t part = row / splits;  // the host makes sure splits divides row
  const int64_t begin = (warp % splits) * part;
  const int64_t local = static_cast<int64_t>(ids[token]) - start;
  const bool owned = local >= 0 && local < length;
  V* dst = out + token * row + begin;
  if (owned) {
    copy_row(dst, weight + local * row + begin, part, lane);
  } else {
    for (int64_t i = lane; i < part; i += kWarpSize) dst[i] = V{};
  }
}

}  // namespace minisgl
