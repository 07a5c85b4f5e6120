// 202 的用例：一个 256 token 的 prefill 分块写进 1024 个槽位的池子
#include <cuda_runtime.h>

#include <cstdint>

#include "store_kv.h"
#include "store_kv_check.h"

int main() {
  check::Case c{"uint4，每行 2 KB，256 个 token", 1024, 256, 128, 128, 128, 128};
  return check::check_store<uint4>(c, check::pick_slots(c.slots, c.n, {0, c.slots - 1}));
}
