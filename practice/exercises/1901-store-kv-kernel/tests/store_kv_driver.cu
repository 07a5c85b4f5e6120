// The test program of exercise 1901. It checks nothing: the judge draws a case (tests/cases.py),
// gives it to this program on stdin, and compares the pool slots the program writes back with
// bytes it computed itself. The program is linked with the learner's code, so anything it prints,
// returns or writes is the learner's to forge; only the data it writes back is judged.
//
// Input (little-endian):
//   12 int64    elem_bytes (16, 4, 2 or 1: V is uint4, uint32_t, uint16_t or uint8_t), slots, n,
//               row, cache_stride, k_stride, v_stride, threads, extra_blocks, one_buffer,
//               v_offset, checked (how many pool slots are compared)
//   int32[n]    indices
//   bytes       k: ((n - 1) * k_stride + row) elements of V, then v: ((n - 1) * v_stride + row)
//   int64[checked]  the compared slots
//   bytes       each compared slot's bytes before the kernel: its k_cache slot, then (two
//               buffers) its v_cache slot; every other slot of the pool is never looked at
// Output, to the descriptor whose number is argv[1]: the compared slots after the kernel, in the
// same layout as their bytes before it.
//
// With one_buffer, k_cache and v_cache share one buffer: v_cache = k_cache + v_offset (elements),
// so a slot is [K row | gap | V row | gap]. k and v end right after their last row and the pool
// right after its last slot, so the emulator catches a read or write past any of them.
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "store_kv.h"

namespace {

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    cudaError_t err_ = (call);                                                             \
    if (err_ != cudaSuccess) {                                                             \
      std::printf("CUDA 错误（%s:%d）：%s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

[[noreturn]] void give_up(const char* what) {
  std::fprintf(stderr, "测试程序出错：%s\n", what);
  std::exit(2);
}

void read_exact(void* dst, size_t bytes) {
  if (bytes && std::fread(dst, 1, bytes, stdin) != bytes) give_up("输入的数据不够");
}

template <typename T>
std::vector<T> read_array(int64_t count) {
  std::vector<T> out(static_cast<size_t>(count));
  read_exact(out.data(), out.size() * sizeof(T));
  return out;
}

struct Shape {
  int64_t elem_bytes, slots, n, row, cache_stride, k_stride, v_stride, threads, extra_blocks,
      one_buffer, v_offset, checked;
};

template <typename V>
std::vector<uint8_t> run(const Shape& s) {
  if (s.elem_bytes != static_cast<int64_t>(sizeof(V))) give_up("输入的 elem_bytes 不对");
  const std::vector<int32_t> indices = read_array<int32_t>(s.n);
  const std::vector<uint8_t> k = read_array<uint8_t>(((s.n - 1) * s.k_stride + s.row) * sizeof(V));
  const std::vector<uint8_t> v = read_array<uint8_t>(((s.n - 1) * s.v_stride + s.row) * sizeof(V));
  const std::vector<int64_t> checked = read_array<int64_t>(s.checked);
  const size_t slot_bytes = s.cache_stride * sizeof(V);
  const size_t per_slot = s.one_buffer ? 1 : 2;  // slots of k_cache (and v_cache) per entry
  std::vector<uint8_t> pool_bytes = read_array<uint8_t>(s.checked * per_slot * slot_bytes);
  if (std::fgetc(stdin) != EOF) give_up("输入有多余的数据");
  for (int64_t slot : checked) {
    if (slot < 0 || slot >= s.slots) give_up("输入的槽位号不在池子里");
  }

  V* k_cache = nullptr;
  V* v_cache = nullptr;
  V *d_k = nullptr, *d_v = nullptr;
  int32_t* d_idx = nullptr;
  CHECK_CUDA(cudaMalloc(&k_cache, s.slots * slot_bytes));
  if (!s.one_buffer) CHECK_CUDA(cudaMalloc(&v_cache, s.slots * slot_bytes));
  CHECK_CUDA(cudaMalloc(&d_k, k.size()));
  CHECK_CUDA(cudaMalloc(&d_v, v.size()));
  CHECK_CUDA(cudaMalloc(&d_idx, s.n * sizeof(int32_t)));
  CHECK_CUDA(cudaMemcpy(d_k, k.data(), k.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_v, v.data(), v.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_idx, indices.data(), s.n * sizeof(int32_t), cudaMemcpyHostToDevice));
  // The compared slots get their bytes from the judge (random: an empty kernel leaves them so).
  for (size_t i = 0; i < checked.size(); ++i) {
    const uint8_t* src = &pool_bytes[i * per_slot * slot_bytes];
    CHECK_CUDA(cudaMemcpy(k_cache + checked[i] * s.cache_stride, src, slot_bytes,
                          cudaMemcpyHostToDevice));
    if (!s.one_buffer) {
      CHECK_CUDA(cudaMemcpy(v_cache + checked[i] * s.cache_stride, src + slot_bytes, slot_bytes,
                            cudaMemcpyHostToDevice));
    }
  }

  // The launch rule of the statement: 2n warps (K row and V row of each token), `threads`
  // threads per block, the grid rounded up, plus any extra blocks.
  V* v_dst = s.one_buffer ? k_cache + s.v_offset : v_cache;
  const int blocks = static_cast<int>((2 * s.n * 32 + s.threads - 1) / s.threads + s.extra_blocks);
  store_kv_kernel<V><<<blocks, static_cast<int>(s.threads)>>>(
      k_cache, v_dst, d_idx, d_k, d_v, s.n, s.row, s.cache_stride, s.k_stride, s.v_stride);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());

  for (size_t i = 0; i < checked.size(); ++i) {
    uint8_t* dst = &pool_bytes[i * per_slot * slot_bytes];
    CHECK_CUDA(cudaMemcpy(dst, k_cache + checked[i] * s.cache_stride, slot_bytes,
                          cudaMemcpyDeviceToHost));
    if (!s.one_buffer) {
      CHECK_CUDA(cudaMemcpy(dst + slot_bytes, v_cache + checked[i] * s.cache_stride, slot_bytes,
                            cudaMemcpyDeviceToHost));
    }
  }
  return pool_bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) give_up("用法：store_kv_driver 输出描述符 < 输入");
  const int out_fd = std::atoi(argv[1]);
  Shape s{};
  read_exact(&s, sizeof s);
  if (s.n < 1 || s.row < 1 || s.slots < s.n || s.cache_stride < s.row || s.k_stride < s.row ||
      s.v_stride < s.row || s.threads < 32 || s.threads % 32 || s.extra_blocks < 0 ||
      s.checked < 0 || s.checked > s.slots ||
      (s.one_buffer && (s.v_offset < s.row || s.v_offset + s.row > s.cache_stride))) {
    give_up("输入的用例形状不对");
  }
  std::vector<uint8_t> out;
  switch (s.elem_bytes) {
    case 16: out = run<uint4>(s); break;
    case 4: out = run<uint32_t>(s); break;
    case 2: out = run<uint16_t>(s); break;
    case 1: out = run<uint8_t>(s); break;
    default: give_up("输入的 elem_bytes 不对");
  }
  for (size_t done = 0; done < out.size();) {
    const ssize_t wrote = write(out_fd, out.data() + done, out.size() - done);
    if (wrote <= 0) give_up("写不出结果");
    done += static_cast<size_t>(wrote);
  }
  return 0;
}
