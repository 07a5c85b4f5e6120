// The learner's kernel as the test programs see it: its declaration only. The learner's
// store_kv.cu is compiled as a translation unit of its own (learner_unit.cu), so nothing in it
// (a #define, an #undef, a #pragma) can change the text of a test program.
#pragma once
#include <cstdint>

template <typename V>
__global__ void store_kv_kernel(V* __restrict__ k_cache, V* __restrict__ v_cache,
                                const int32_t* __restrict__ indices, const V* __restrict__ k,
                                const V* __restrict__ v, int64_t n, int64_t row,
                                int64_t cache_stride, int64_t k_stride, int64_t v_stride);
