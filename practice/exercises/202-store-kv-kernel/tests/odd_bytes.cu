// 202 的用例：按字节搬运：每行 7 字节，k、v 的行步长是奇数；每块只有一个 warp
#include <cuda_runtime.h>

#include <cstdint>

#include "store_kv.h"
#include "store_kv_check.h"

int main() {
  check::Case c{"uint8_t，每行 7 字节，奇数步长", 70, 33, 7, 7, 11, 9};
  c.threads = 32;
  return check::check_store<uint8_t>(c, check::pick_slots(c.slots, c.n, {c.slots - 1}));
}
