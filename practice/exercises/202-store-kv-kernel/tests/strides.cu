// 202 的用例：k、v 的行步长各不相同，池子的行也比一行 K 宽（行尾的空隙不能被写）
#include <cuda_runtime.h>

#include <cstdint>

#include "store_kv.h"
#include "store_kv_check.h"

int main() {
  // 每行 40 个 uint32_t（160 字节）；池子的行步长 64，k 的行步长 48，v 的行步长 72；每块 64 个线程
  check::Case c{"uint32_t，k/v/池子的行步长各不相同", 200, 29, 40, 64, 48, 72};
  c.threads = 64;
  return check::check_store<uint32_t>(c, check::pick_slots(c.slots, c.n, {}));
}
