// 1901. 写 KV Cache 的 kernel
//
// 把第 t 个新 token 的 K 行 k[t] 写到 k_cache 的第 indices[t] 行，V 行 v[t] 写到 v_cache 的
// 第 indices[t] 行（t = 0 .. n-1）。长度和步长都以 V 为单位，见题面。
//
// 启动方式（测试程序这样启动，不要改）：
//   一共至少 2n 个 warp；全局第 w 个 warp（w = (blockIdx.x * blockDim.x + threadIdx.x) / 32）
//   负责第 w / 2 个 token：w 为偶数时搬 K 行，为奇数时搬 V 行。w / 2 >= n 的 warp 什么也不做。
//   blockDim.x 是 32 的倍数，但不一定是 128。
#include <cstdint>

template <typename V>
__global__ void store_kv_kernel(V* __restrict__ k_cache, V* __restrict__ v_cache,
                                const int32_t* __restrict__ indices, const V* __restrict__ k,
                                const V* __restrict__ v, int64_t n, int64_t row,
                                int64_t cache_stride, int64_t k_stride, int64_t v_stride) {
  // TODO 1：算出这个线程属于全局第几个 warp、是 warp 里的第几个 lane，
  //         它负责哪个 token、搬 K 还是 V；token >= n 时直接 return。
  // TODO 2：算出源行和目标行的起始地址（偏移用 int64_t：槽位号 × 行步长可能超过 2^31）。
  // TODO 3：32 个 lane 合作搬这一行：lane 搬第 lane、lane + 32、lane + 64、…… 个元素。
}
