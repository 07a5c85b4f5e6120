// Self-test of the kernels in python/minisgl/kernel/csrc/kv_kernels.cuh, byte for byte against
// a plain C++ reference on random data. Runs on a GPU or on the CPU emulator:
//   nvcc -std=c++17 -O2 -I../../python/minisgl/kernel/csrc test_kv_kernels.cu -o test_kv_kernels
//   python tools/emu_kernels.py tests/cuda/test_kv_kernels.cu
// Prints one PASS/FAIL line per case; exits 1 if any case fails.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kv_kernels.cuh"

#define CUDA_OK(call)                                                             \
  do {                                                                            \
    cudaError_t err_ = (call);                                                    \
    if (err_ != cudaSuccess) {                                                    \
      printf("CUDA error at line %d: %s\n", __LINE__, cudaGetErrorString(err_)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

static uint32_t rng_state = 12345;
static uint8_t random_byte() {  // xorshift: the same bytes on every machine
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 17;
  rng_state ^= rng_state << 5;
  return static_cast<uint8_t>(rng_state);
}

template <typename T>
static std::vector<T> random_vector(size_t count) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count * sizeof(T); ++i) reinterpret_cast<uint8_t*>(v.data())[i] = random_byte();
  return v;
}

template <typename T>
static T* to_device(const std::vector<T>& host) {
  T* ptr = nullptr;
  CUDA_OK(cudaMalloc(&ptr, host.size() * sizeof(T)));
  CUDA_OK(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return ptr;
}

template <typename T>
static std::vector<T> to_host(const T* ptr, size_t count) {
  std::vector<T> host(count);
  CUDA_OK(cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

static int blocks_for(int64_t warps, int threads) {
  return static_cast<int>((warps * 32 + threads - 1) / threads);
}

// n new tokens of row_bytes each go to distinct random slots of a pool of `slots` rows.
template <typename V>
static bool test_store(int slots, int n, int row_bytes) {
  const int row = row_bytes / static_cast<int>(sizeof(V));
  auto k_cache = random_vector<V>(static_cast<size_t>(slots) * row), v_cache = random_vector<V>(static_cast<size_t>(slots) * row);
  auto k = random_vector<V>(static_cast<size_t>(n) * row), v = random_vector<V>(static_cast<size_t>(n) * row);
  std::vector<int32_t> order(slots), indices(n);
  for (int i = 0; i < slots; ++i) order[i] = i;
  for (int i = slots - 1; i > 0; --i) std::swap(order[i], order[random_byte() % (i + 1)]);
  for (int i = 0; i < n; ++i) indices[i] = order[i];

  V *d_kc = to_device(k_cache), *d_vc = to_device(v_cache), *d_k = to_device(k), *d_v = to_device(v);
  int32_t* d_idx = to_device(indices);
  const int threads = 128;
  minisgl::store_kv_kernel<V><<<blocks_for(2 * static_cast<int64_t>(n), threads), threads>>>(d_kc, d_vc, d_idx, d_k, d_v, n, row, row, row, row);
  CUDA_OK(cudaGetLastError());
  auto got_k = to_host(d_kc, k_cache.size()), got_v = to_host(d_vc, v_cache.size());
  for (int i = 0; i < n; ++i) {  // the reference: plain row copies on the host
    memcpy(&k_cache[static_cast<size_t>(indices[i]) * row], &k[static_cast<size_t>(i) * row], row_bytes);
    memcpy(&v_cache[static_cast<size_t>(indices[i]) * row], &v[static_cast<size_t>(i) * row], row_bytes);
  }
  const bool ok = memcmp(got_k.data(), k_cache.data(), k_cache.size() * sizeof(V)) == 0 &&
                  memcmp(got_v.data(), v_cache.data(), v_cache.size() * sizeof(V)) == 0;
  CUDA_OK(cudaFree(d_kc)); CUDA_OK(cudaFree(d_vc)); CUDA_OK(cudaFree(d_k)); CUDA_OK(cudaFree(d_v));
  CUDA_OK(cudaFree(d_idx));
  return ok;
}

// Rows [start, start + length) of a `vocab`-token table of bf16 rows of `hidden` elements.
static bool test_embedding(int vocab, int start, int length, int n, int hidden) {
  const int row_bytes = hidden * 2, row = row_bytes / 16;  // copied as uint4
  const int splits = row_bytes % 8192 == 0 ? 4 : (row_bytes % 4096 == 0 ? 2 : 1);
  auto weight = random_vector<uint4>(static_cast<size_t>(length) * row);
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = (random_byte() << 8 | random_byte()) % vocab;
  uint4 *d_w = to_device(weight), *d_out = to_device(random_vector<uint4>(static_cast<size_t>(n) * row));  // poisoned
  int32_t* d_ids = to_device(ids);
  const int threads = 128;
  minisgl::embedding_kernel<uint4><<<blocks_for(static_cast<int64_t>(n) * splits, threads), threads>>>(
      d_out, d_w, d_ids, n, row, start, length, splits);
  CUDA_OK(cudaGetLastError());
  auto got = to_host(d_out, static_cast<size_t>(n) * row);
  std::vector<uint8_t> expected(static_cast<size_t>(n) * row_bytes, 0);
  for (int i = 0; i < n; ++i) {
    const int local = ids[i] - start;
    if (local >= 0 && local < length) memcpy(&expected[static_cast<size_t>(i) * row_bytes], &weight[static_cast<size_t>(local) * row], row_bytes);
  }
  const bool ok = memcmp(got.data(), expected.data(), expected.size()) == 0;
  CUDA_OK(cudaFree(d_w)); CUDA_OK(cudaFree(d_out)); CUDA_OK(cudaFree(d_ids));
  return ok;
}

int main() {
  bool all = true;
  auto report = [&](const char* name, bool ok) {
    printf("%-40s %s\n", name, ok ? "PASS" : "FAIL");
    all = all && ok;
  };
  report("store_kv uint4  (8 heads x 128 x bf16)", test_store<uint4>(300, 37, 8 * 128 * 2));
  report("store_kv uint16 (row = 6 bytes)", test_store<uint16_t>(64, 17, 6));
  report("embedding, full vocab", test_embedding(1000, 0, 1000, 23, 64));
  report("embedding, vocab shard [500, 750)", test_embedding(1000, 500, 250, 41, 4096));
  return all ? 0 : 1;
}
