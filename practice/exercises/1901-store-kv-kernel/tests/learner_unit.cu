// The learner's translation unit: store_kv.cu, then the instances of store_kv_kernel<V> that the
// test programs launch (they see only the declaration in store_kv.h). The judge compiles it
// apart from each test program and links the two.
#include <cuda_runtime.h>

#include <cstdint>

#include "store_kv.cu"

#define STORE_KV_INSTANCE(V)                                                                  \
  template __global__ void store_kv_kernel<V>(V* __restrict__, V* __restrict__,               \
                                              const int32_t* __restrict__, const V* __restrict__, \
                                              const V* __restrict__, int64_t, int64_t, int64_t,   \
                                              int64_t, int64_t)
STORE_KV_INSTANCE(uint4);
STORE_KV_INSTANCE(uint32_t);
STORE_KV_INSTANCE(uint16_t);
STORE_KV_INSTANCE(uint8_t);
