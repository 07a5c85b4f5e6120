// PyTorch bindings for the kernels of kv_kernels.cuh, built just in time by kernel/cuda_ext.py.
// The CUDA stream comes from Python as an integer (torch.cuda.current_stream().cuda_stream), so
// this file needs only torch's CPU-side headers plus the CUDA runtime, and compiles on machines
// without a CUDA build of torch (tools/check.py does exactly that).
#include <cuda_runtime.h>
#include <torch/extension.h>

#include <cstdint>

#include "kv_kernels.cuh"

namespace {

constexpr int kThreadsPerBlock = 128;  // 4 warps: measured best on an H200 for 2 KB rows

bool aligned(const at::Tensor& t, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0;
}

// The widest copy unit (16, 4 or 2 bytes) that divides the row and every row start.
int64_t vector_bytes(int64_t row_bytes, std::initializer_list<const at::Tensor*> tensors) {
  for (int64_t bytes : {16, 4, 2}) {
    bool ok = row_bytes % bytes == 0;
    for (const at::Tensor* t : tensors) {
      ok = ok && aligned(*t, bytes) && (t->stride(0) * t->element_size()) % bytes == 0;
    }
    if (ok) return bytes;
  }
  return 1;
}

int64_t blocks_for(int64_t warps) {
  return (warps * minisgl::kWarpSize + kThreadsPerBlock - 1) / kThreadsPerBlock;
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  TORCH_CHECK(err == cudaSuccess, what, " launch failed: ", cudaGetErrorString(err));
}

void check_rows(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.dim() == 2, name, " must be 2-D [rows, row elements], got ", t.dim(), "-D");
  TORCH_CHECK(t.stride(1) == 1, name, " rows must be contiguous");
}

template <typename V>
void launch_store(at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& indices,
                  const at::Tensor& k, const at::Tensor& v, int64_t row_bytes,
                  cudaStream_t stream) {
  const int64_t n = indices.size(0);
  const int64_t es = k.element_size();
  minisgl::store_kv_kernel<V><<<blocks_for(2 * n), kThreadsPerBlock, 0, stream>>>(
      static_cast<V*>(k_cache.data_ptr()), static_cast<V*>(v_cache.data_ptr()),
      indices.data_ptr<int32_t>(), static_cast<const V*>(k.data_ptr()),
      static_cast<const V*>(v.data_ptr()), n, row_bytes / sizeof(V),
      k_cache.stride(0) * es / sizeof(V), k.stride(0) * es / sizeof(V),
      v.stride(0) * es / sizeof(V));
}

}  // namespace

// k_cache, v_cache: [slots, row]; k, v: [n, row]; indices: int32 [n] (slot of each new token).
void store_kv(at::Tensor k_cache, at::Tensor v_cache, at::Tensor indices, at::Tensor k,
              at::Tensor v, int64_t stream_ptr) {
  check_rows(k_cache, "k_cache");
  check_rows(v_cache, "v_cache");
  check_rows(k, "k");
  check_rows(v, "v");
  TORCH_CHECK(indices.is_cuda() && indices.dim() == 1, "indices must be a 1-D CUDA tensor");
  TORCH_CHECK(indices.scalar_type() == at::kInt, "indices must be int32, got ",
              indices.scalar_type());
  TORCH_CHECK(k.scalar_type() == k_cache.scalar_type() && v.scalar_type() == k.scalar_type() &&
                  v_cache.scalar_type() == k.scalar_type(),
              "k, v, k_cache and v_cache must share one dtype");
  TORCH_CHECK(k.sizes() == v.sizes(), "k and v must have the same shape");
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes() && k_cache.stride(0) == v_cache.stride(0),
              "k_cache and v_cache must have the same shape and row stride");
  TORCH_CHECK(k.size(1) == k_cache.size(1), "row length of k (", k.size(1),
              ") differs from the cache's (", k_cache.size(1), ")");
  TORCH_CHECK(k.size(0) == indices.size(0), "k has ", k.size(0), " rows but indices has ",
              indices.size(0));
  const int64_t n = indices.size(0);
  if (n == 0) return;
  const int64_t row_bytes = k.size(1) * k.element_size();
  auto stream = reinterpret_cast<cudaStream_t>(stream_ptr);
  switch (vector_bytes(row_bytes, {&k_cache, &v_cache, &k, &v})) {
    case 16: launch_store<uint4>(k_cache, v_cache, indices, k, v, row_bytes, stream); break;
    case 4: launch_store<uint32_t>(k_cache, v_cache, indices, k, v, row_bytes, stream); break;
    case 2: launch_store<uint16_t>(k_cache, v_cache, indices, k, v, row_bytes, stream); break;
    default: launch_store<uint8_t>(k_cache, v_cache, indices, k, v, row_bytes, stream); break;
  }
  check_launch("store_kv");
}

template <typename V>
void launch_embedding(at::Tensor& out, const at::Tensor& weight, const at::Tensor& ids,
                      int64_t start, int64_t length, int64_t row_bytes, cudaStream_t stream) {
  const int64_t n = ids.size(0);
  // Long rows are shared by several warps, each copying an equal contiguous part of at least
  // 2 KB (four 16-byte loads per lane): enough warps for small batches, enough work per warp.
  const int splits = row_bytes % 8192 == 0 ? 4 : (row_bytes % 4096 == 0 ? 2 : 1);
  minisgl::embedding_kernel<V><<<blocks_for(n * splits), kThreadsPerBlock, 0, stream>>>(
      static_cast<V*>(out.data_ptr()), static_cast<const V*>(weight.data_ptr()),
      ids.data_ptr<int32_t>(), n, row_bytes / sizeof(V), start, length, splits);
}

// weight: [length, hidden] rows [start, start + length) of the vocabulary; ids: int32 [n].
at::Tensor indexing(at::Tensor weight, at::Tensor ids, int64_t start, int64_t length,
                    int64_t stream_ptr) {
  check_rows(weight, "weight");
  TORCH_CHECK(weight.is_contiguous(), "weight must be contiguous");
  TORCH_CHECK(ids.is_cuda() && ids.dim() == 1, "ids must be a 1-D CUDA tensor");
  TORCH_CHECK(ids.scalar_type() == at::kInt, "ids must be int32, got ", ids.scalar_type());
  TORCH_CHECK(length == weight.size(0), "length (", length, ") must equal weight.size(0) (",
              weight.size(0), ")");
  const int64_t n = ids.size(0);
  auto out = at::empty({n, weight.size(1)}, weight.options());
  if (n == 0) return out;
  const int64_t row_bytes = weight.size(1) * weight.element_size();
  auto stream = reinterpret_cast<cudaStream_t>(stream_ptr);
  switch (vector_bytes(row_bytes, {&weight, &out})) {
    case 16: launch_embedding<uint4>(out, weight, ids, start, length, row_bytes, stream); break;
    case 4: launch_embedding<uint32_t>(out, weight, ids, start, length, row_bytes, stream); break;
    case 2: launch_embedding<uint16_t>(out, weight, ids, start, length, row_bytes, stream); break;
    default: launch_embedding<uint8_t>(out, weight, ids, start, length, row_bytes, stream); break;
  }
  check_launch("indexing");
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("store_kv", &store_kv, "write K/V rows into the KV pool at the given slots");
  m.def("indexing", &indexing, "vocabulary-parallel embedding lookup");
}
