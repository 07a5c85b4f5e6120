// Dynamic shared memory: a tiled transpose of a 70 x 45 matrix (tile 32 x 33, padded against bank
// conflicts) through a namespace-scope `extern __shared__` array, and a tiled 37 x 50 by 50 x 29
// matrix product with two tiles carved out of one dynamic allocation declared inside the kernel.
// Matrix entries are small integers, so every float sum is exact whatever the summation order.
#include <cstdio>
#include <vector>
#include "check.cuh"

constexpr int TILE = 32;
constexpr int ROWS_PER_PASS = 8;

extern __shared__ unsigned char dynamic_bytes[];

__global__ void transpose(const int* in, int* out, int rows, int cols) {
    int* tile = reinterpret_cast<int*>(dynamic_bytes);  // TILE x (TILE + 1) ints
    int x = blockIdx.x * TILE + threadIdx.x;
    for (int j = threadIdx.y; j < TILE; j += ROWS_PER_PASS) {
        int y = blockIdx.y * TILE + j;
        if (x < cols && y < rows) tile[j * (TILE + 1) + threadIdx.x] = in[y * cols + x];
    }
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;  // transposed block
    for (int j = threadIdx.y; j < TILE; j += ROWS_PER_PASS) {
        int y = blockIdx.x * TILE + j;
        if (x < rows && y < cols) out[y * rows + x] = tile[threadIdx.x * (TILE + 1) + j];
    }
}

constexpr int MM = 16;

__global__ void matmul(const float* a, const float* b, float* c, int m, int k, int n) {
    extern __shared__ float smem[];
    float* as = smem;            // MM x MM tile of a
    float* bs = smem + MM * MM;  // MM x MM tile of b
    int row = blockIdx.y * MM + threadIdx.y;
    int col = blockIdx.x * MM + threadIdx.x;
    float acc = 0.0f;
    for (int t0 = 0; t0 < k; t0 += MM) {
        int ak = t0 + threadIdx.x, bk = t0 + threadIdx.y;
        as[threadIdx.y * MM + threadIdx.x] = (row < m && ak < k) ? a[row * k + ak] : 0.0f;
        bs[threadIdx.y * MM + threadIdx.x] = (bk < k && col < n) ? b[bk * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < MM; ++i) acc += as[threadIdx.y * MM + i] * bs[i * MM + threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = acc;
}

int main() {
    Checker check("smem_tiles");

    const int rows = 70, cols = 45;
    std::vector<int> in(rows * cols), out(rows * cols, -1);
    for (int i = 0; i < rows * cols; ++i) in[i] = i * 3 + 1;
    int *d_in, *d_out;
    CUDA_CHECK(cudaMalloc(&d_in, in.size() * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_out, out.size() * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d_in, in.data(), in.size() * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_out, 0xff, out.size() * sizeof(int)));
    dim3 grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    dim3 block(TILE, ROWS_PER_PASS);
    transpose<<<grid, block, TILE * (TILE + 1) * sizeof(int)>>>(d_in, d_out, rows, cols);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(int), cudaMemcpyDeviceToHost));
    long long checksum = 0;
    for (int y = 0; y < cols; ++y)
        for (int x = 0; x < rows; ++x) {
            check.expect_eq(out[y * rows + x], in[x * cols + y], "transpose");
            checksum += static_cast<long long>(out[y * rows + x]) * (y * rows + x + 1);
        }
    printf("transpose %dx%d: grid %ux%u, out[0..3] = %d %d %d %d, out[last] = %d, checksum %lld\n", rows, cols,
           grid.x, grid.y, out[0], out[1], out[2], out[3], out[rows * cols - 1], checksum);

    const int m = 37, k = 50, n = 29;
    std::vector<float> a(m * k), b(k * n), c(m * n, 0.0f);
    for (int i = 0; i < m * k; ++i) a[i] = static_cast<float>((i * 7) % 9 - 4);
    for (int i = 0; i < k * n; ++i) b[i] = static_cast<float>((i * 5) % 7 - 3);
    float *d_a, *d_b, *d_c;
    CUDA_CHECK(cudaMalloc(&d_a, a.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_b, b.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_c, c.size() * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_a, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_b, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
    dim3 mgrid((n + MM - 1) / MM, (m + MM - 1) / MM), mblock(MM, MM);
    matmul<<<mgrid, mblock, 2 * MM * MM * sizeof(float)>>>(d_a, d_b, d_c, m, k, n);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(c.data(), d_c, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double trace_like = 0;
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            float want = 0.0f;
            for (int t = 0; t < k; ++t) want += a[i * k + t] * b[t * n + j];
            check.expect(c[i * n + j] == want, "matmul element", static_cast<long long>(c[i * n + j]),
                         static_cast<long long>(want));
            trace_like += c[i * n + j] * ((i + j) % 3 - 1);
        }
    printf("matmul %dx%d * %dx%d: c[0][0] %.0f c[1][2] %.0f c[36][28] %.0f, weighted sum %.0f\n", m, k, k, n,
           c[0], c[1 * n + 2], c[36 * n + 28], trace_like);
    return check.finish();
}
