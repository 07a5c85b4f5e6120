// 202 的用例：每行只有 6 字节（3 个 uint16_t），比一个 warp 的 32 个 lane 少得多
#include <cuda_runtime.h>

#include <cstdint>

#include "store_kv.h"
#include "store_kv_check.h"

int main() {
  check::Case c{"uint16_t，每行 6 字节，17 个 token", 64, 17, 3, 3, 3, 3};
  return check::check_store<uint16_t>(c, check::pick_slots(c.slots, c.n, {}));
}
