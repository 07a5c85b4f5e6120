// 202 的用例：槽位号很大：槽位号 × 行步长超过 2^31，用 32 位整数算偏移就会溢出
#include <cuda_runtime.h>

#include <cstdint>

#include "store_kv.h"
#include "store_kv_check.h"

int main() {
  // 一个 2.5 GiB 的缓冲区同时放 K 和 V：每个槽位 64 字节，K 在 [0, 24)、V 在 [32, 56)，
  // 其余是空隙。按字节搬运（uint8_t）。只比较写过的槽位和它们的邻居（整个池子太大）。
  const int64_t slots = (int64_t{1} << 25) + (int64_t{1} << 23);
  check::Case c{"槽位号 × 行步长超过 2^31", slots, 24, 24, 64, 24, 24};
  c.one_buffer = true;
  c.v_offset = 32;
  c.whole_pool = false;
  const int64_t edge = int64_t{1} << 25;  // 从这个槽位起，槽位号 × 64 >= 2^31
  return check::check_store<uint8_t>(c, check::pick_slots(slots, c.n, {edge - 1, edge, edge + 1, slots - 1}));
}
