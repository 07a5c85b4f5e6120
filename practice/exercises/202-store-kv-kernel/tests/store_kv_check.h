// Shared by the test programs of exercise 202: builds one store_kv case, launches the learner's
// store_kv_kernel<V> with the launch rule of the statement, and compares every byte it was meant
// to touch (and the poisoned bytes around them) with a plain host-side copy.
//
// Each program includes "store_kv.h" (the declaration of the learner's kernel; the learner's
// store_kv.cu is compiled on its own, see learner_unit.cu) before this header and calls
// check_store<V>(...) from main. Everything here has internal linkage (an unnamed namespace), so
// no symbol the learner's unit defines can take the place of a helper at link time. Output: one line "<name> PASS" or a few lines describing the
// first differences and then "<name> FAIL"; the exit status is 0 only on PASS.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <vector>

namespace check {
namespace {

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    cudaError_t err_ = (call);                                                             \
    if (err_ != cudaSuccess) {                                                             \
      std::printf("CUDA 错误（%s:%d）：%s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

// splitmix64: the same poison and the same data on every machine.
inline uint64_t g_state = 0x2f6a1c83d5e9b047ull;
inline uint64_t next_u64() {
  uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline void fill_random(void* dst, size_t bytes) {
  auto* p = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(next_u64() >> 24);
}

// `count` distinct slots out of [0, slots), in random order, always including every slot of
// `must` (so a case can force the last slot of the pool, or slots past 2^31 / stride).
inline std::vector<int32_t> pick_slots(int64_t slots, int64_t count, std::vector<int64_t> must) {
  std::set<int64_t> seen(must.begin(), must.end());
  std::vector<int64_t> picked(must.begin(), must.end());
  while (static_cast<int64_t>(picked.size()) < count) {
    const int64_t s = static_cast<int64_t>(next_u64() % static_cast<uint64_t>(slots));
    if (seen.insert(s).second) picked.push_back(s);
  }
  for (size_t i = picked.size(); i > 1; --i) std::swap(picked[i - 1], picked[next_u64() % i]);
  return std::vector<int32_t>(picked.begin(), picked.end());
}

struct Case {
  const char* name;
  int64_t slots;         // rows of the pool
  int64_t n;             // new tokens
  int64_t row;           // elements of V per K (or V) row
  int64_t cache_stride;  // elements of V from one slot to the next
  int64_t k_stride;      // elements of V from one row of k to the next
  int64_t v_stride;      // same for v
  int threads = 128;     // blockDim.x (a multiple of 32)
  int extra_blocks = 0;  // blocks beyond the ones 2n warps need (they must do nothing)
  // The pool as one buffer holding both caches: v_cache = k_cache + v_offset (elements), so
  // each slot is [K row | gap | V row | gap]. Otherwise k_cache and v_cache are two buffers.
  bool one_buffer = false;
  int64_t v_offset = 0;
  // Compare the whole pool, or (for a pool too big to copy around) only the written slots and
  // their neighbours, plus the first and last slots.
  bool whole_pool = true;
};

// One device buffer of `slots` slots, mirrored on the host slot by slot for the slots we check.
template <typename V>
struct Pool {
  const char* name;
  V* dev = nullptr;
  int64_t stride = 0;
  std::map<int64_t, std::vector<uint8_t>> expected;  // slot -> its bytes after the kernel

  void allocate(int64_t slots) { CHECK_CUDA(cudaMalloc(&dev, slots * stride * sizeof(V))); }
  size_t slot_bytes() const { return stride * sizeof(V); }
  void poison(int64_t slot) {  // random bytes, on the device and in the expectation
    std::vector<uint8_t>& bytes = expected[slot];
    bytes.resize(slot_bytes());
    fill_random(bytes.data(), bytes.size());
    CHECK_CUDA(cudaMemcpy(dev + slot * stride, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  }
};

template <typename V>
bool compare(const Pool<V>& pool, const std::map<int64_t, const char*>& owner, int& wrong_slots) {
  bool ok = true;  // `wrong_slots` counts the slots that differ; the first 6 are described
  std::vector<uint8_t> got;
  for (const auto& [slot, want] : pool.expected) {
    got.resize(want.size());
    CHECK_CUDA(cudaMemcpy(got.data(), pool.dev + slot * pool.stride, got.size(), cudaMemcpyDeviceToHost));
    if (std::memcmp(got.data(), want.data(), want.size()) == 0) continue;
    ok = false;
    if (++wrong_slots > 6) continue;
    size_t first = 0;
    while (got[first] == want[first]) ++first;
    size_t wrong = 0;
    for (size_t i = 0; i < want.size(); ++i) wrong += got[i] != want[i];
    auto who = owner.find(slot);
    std::printf("  %s 的第 %lld 号槽位（%s）：从第 %zu 个字节起不对（期望 0x%02x，实际 0x%02x），"
                "这个槽位共有 %zu / %zu 个字节不对\n",
                pool.name, static_cast<long long>(slot),
                who == owner.end() ? "不该被写" : who->second, first, want[first], got[first],
                wrong, want.size());
  }
  return ok;
}

template <typename V>
int check_store(const Case& c, const std::vector<int32_t>& indices) {
  const int64_t n = c.n;
  if (static_cast<int64_t>(indices.size()) != n) {
    std::printf("测试程序有误：indices 的长度不是 n\n");
    return 1;
  }
  // k and v: each row holds `row` elements, rows `k_stride` / `v_stride` apart; the buffers end
  // right after the last row, so reading past it is caught.
  std::vector<V> k((n - 1) * c.k_stride + c.row), v((n - 1) * c.v_stride + c.row);
  fill_random(k.data(), k.size() * sizeof(V));
  fill_random(v.data(), v.size() * sizeof(V));

  Pool<V> k_pool{"k_cache"}, v_pool{"v_cache"};
  k_pool.stride = v_pool.stride = c.cache_stride;
  k_pool.allocate(c.slots);
  if (c.one_buffer) {
    k_pool.name = "KV 池（k_cache 与 v_cache 共用的缓冲区）";
  } else {
    v_pool.allocate(c.slots);
  }
  std::set<int64_t> checked;
  if (c.whole_pool) {
    for (int64_t s = 0; s < c.slots; ++s) checked.insert(s);
  } else {
    for (int32_t s : indices) {
      for (int64_t d = -1; d <= 1; ++d) {
        if (s + d >= 0 && s + d < c.slots) checked.insert(s + d);
      }
    }
    checked.insert(0);
    checked.insert(c.slots - 1);
  }
  for (int64_t s : checked) {
    k_pool.poison(s);
    if (!c.one_buffer) v_pool.poison(s);
  }

  V* d_k = nullptr;
  V* d_v = nullptr;
  int32_t* d_idx = nullptr;
  CHECK_CUDA(cudaMalloc(&d_k, k.size() * sizeof(V)));
  CHECK_CUDA(cudaMalloc(&d_v, v.size() * sizeof(V)));
  CHECK_CUDA(cudaMalloc(&d_idx, n * sizeof(int32_t)));
  CHECK_CUDA(cudaMemcpy(d_k, k.data(), k.size() * sizeof(V), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_v, v.data(), v.size() * sizeof(V), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_idx, indices.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice));

  // The launch rule of the statement: 2n warps (one for the K row and one for the V row of each
  // token), blockDim.x threads per block, the grid rounded up (plus any extra blocks).
  V* d_k_cache = k_pool.dev;
  V* d_v_cache = c.one_buffer ? k_pool.dev + c.v_offset : v_pool.dev;
  const int64_t warps = 2 * n;
  const int blocks = static_cast<int>((warps * 32 + c.threads - 1) / c.threads) + c.extra_blocks;
  store_kv_kernel<V><<<blocks, c.threads>>>(d_k_cache, d_v_cache, d_idx, d_k, d_v, n, c.row,
                                            c.cache_stride, c.k_stride, c.v_stride);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());

  // The reference: plain row copies into the host mirror.
  std::map<int64_t, const char*> owner;
  std::vector<std::vector<char>> labels;
  labels.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = indices[i];
    const size_t row_bytes = c.row * sizeof(V);
    uint8_t* k_dst = k_pool.expected.at(slot).data();
    uint8_t* v_dst = c.one_buffer ? k_dst + c.v_offset * sizeof(V) : v_pool.expected.at(slot).data();
    std::memcpy(k_dst, &k[i * c.k_stride], row_bytes);
    std::memcpy(v_dst, &v[i * c.v_stride], row_bytes);
    labels.emplace_back(64);
    std::snprintf(labels.back().data(), 64, "第 %lld 个新 token 的目标", static_cast<long long>(i));
    owner[slot] = labels.back().data();
  }
  int wrong_slots = 0;
  bool ok = compare(k_pool, owner, wrong_slots);
  if (!c.one_buffer) ok = compare(v_pool, owner, wrong_slots) && ok;
  if (wrong_slots > 6) std::printf("  ……一共有 %d 个槽位不对\n", wrong_slots);
  std::printf("%s %s\n", c.name, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace check
