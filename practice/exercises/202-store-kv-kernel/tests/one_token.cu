// 202 的用例：只有 1 个新 token（decode 批大小为 1），写到池子的最后一个槽位；grid 里多出好几个 block
#include <cuda_runtime.h>

#include <cstdint>

#include "store_kv.h"
#include "store_kv_check.h"

int main() {
  // 每行 4 KB（256 个 uint4）；池子最后一行紧贴缓冲区末尾，多写一个元素就越界
  check::Case c{"n = 1，写到最后一个槽位", 50, 1, 256, 256, 256, 256};
  c.threads = 256;
  c.extra_blocks = 2;
  return check::check_store<uint4>(c, {static_cast<int32_t>(c.slots - 1)});
}
