// 1901. 写 KV Cache 的 kernel：参考答案。
// 两个 warp 负责一个 token：偶数号 warp 搬 K 行，奇数号 warp 搬 V 行。每个 lane 每一轮先读
// 两个元素、再写两个，让更多的读请求同时在路上。
#include <cstdint>

template <typename V>
__global__ void store_kv_kernel(V* __restrict__ k_cache, V* __restrict__ v_cache,
                                const int32_t* __restrict__ indices, const V* __restrict__ k,
                                const V* __restrict__ v, int64_t n, int64_t row,
                                int64_t cache_stride, int64_t k_stride, int64_t v_stride) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t warp = thread / 32;
  const int64_t lane = thread % 32;
  const int64_t token = warp >> 1;
  if (token >= n) return;  // 多出来的 warp（grid 向上取整、额外的 block）直接退出

  // 偏移全部用 64 位算：槽位号 × 行步长可能超过 2^31。
  const int64_t slot = indices[token];
  const bool is_v = (warp & 1) != 0;
  V* dst = (is_v ? v_cache : k_cache) + slot * cache_stride;
  const V* src = is_v ? v + token * v_stride : k + token * k_stride;

  int64_t i = lane;
  for (; i + 32 < row; i += 64) {  // 两个元素一组：先读后写
    const V a = src[i];
    const V b = src[i + 32];
    dst[i] = a;
    dst[i + 32] = b;
  }
  if (i < row) dst[i] = src[i];  // 剩下的不到两组
}
