// 202 的用例：每行 2 KB（Qwen3-0.6B 一层的 K：8 个 KV 头 × 128 × bf16），按 uint4 搬运
#include <cuda_runtime.h>

#include <cstdint>

#include "store_kv.h"
#include "store_kv_check.h"

int main() {
  // 300 个槽位的池子，37 个新 token 写到互不相同的随机槽位；行紧挨着存放
  check::Case c{"uint4，每行 2 KB，37 个 token", 300, 37, 128, 128, 128, 128};
  return check::check_store<uint4>(c, check::pick_slots(c.slots, c.n, {}));
}
