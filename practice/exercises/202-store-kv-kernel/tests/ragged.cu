// 202 的用例：13 个 token、每块 3 个 warp：26 个 warp 凑不满 9 个 block，最后一个 warp 没有活干
#include <cuda_runtime.h>

#include <cstdint>

#include "store_kv.h"
#include "store_kv_check.h"

int main() {
  // 每行 40 个 uint4（640 字节：5 个头 × 64 × bf16），不是 32 的整数倍；包含最后一个槽位
  check::Case c{"n = 13，每块 96 个线程", 100, 13, 40, 40, 40, 40};
  c.threads = 96;
  return check::check_store<uint4>(c, check::pick_slots(c.slots, c.n, {c.slots - 1}));
}
