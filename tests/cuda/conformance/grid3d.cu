// Indexing: a 3-D grid of 3-D blocks where every thread records its coordinates and what it sees
// of gridDim/blockDim, a 2-D launch over an image with a ragged edge, and launches whose grid and
// block are plain integers.
#include <cstdio>
#include <vector>
#include "check.cuh"

__global__ void where_am_i(unsigned* coords, unsigned* dims, unsigned* count) {
    unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    unsigned thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    unsigned id = block * (blockDim.x * blockDim.y * blockDim.z) + thread;
    coords[id] = threadIdx.x | threadIdx.y << 4 | threadIdx.z << 8 | blockIdx.x << 12 | blockIdx.y << 16 |
                 blockIdx.z << 20;
    if (id == 0) {
        dims[0] = gridDim.x; dims[1] = gridDim.y; dims[2] = gridDim.z;
        dims[3] = blockDim.x; dims[4] = blockDim.y; dims[5] = blockDim.z;
    }
    atomicAdd(count, 1u);
}

__global__ void image(int* out, int width, int height) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) out[y * width + x] = x * 1000 + y;
}

__global__ void linear(int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * i - 3 * i;
}

int main() {
    Checker check("grid3d");

    dim3 grid(3, 2, 4), block(4, 3, 2);
    const unsigned total = 3 * 2 * 4 * 4 * 3 * 2;
    unsigned *d_coords, *d_dims, *d_count;
    CUDA_CHECK(cudaMalloc(&d_coords, total * sizeof(unsigned)));
    CUDA_CHECK(cudaMalloc(&d_dims, 6 * sizeof(unsigned)));
    CUDA_CHECK(cudaMalloc(&d_count, sizeof(unsigned)));
    CUDA_CHECK(cudaMemset(d_count, 0, sizeof(unsigned)));
    where_am_i<<<grid, block>>>(d_coords, d_dims, d_count);
    CUDA_CHECK(cudaGetLastError());
    std::vector<unsigned> coords(total);
    unsigned dims[6], count = 0;
    CUDA_CHECK(cudaMemcpy(coords.data(), d_coords, total * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(dims, d_dims, sizeof(dims), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&count, d_count, sizeof(count), cudaMemcpyDeviceToHost));
    unsigned id = 0;
    unsigned long long weighted = 0;
    for (unsigned bz = 0; bz < 4; ++bz)
        for (unsigned by = 0; by < 2; ++by)
            for (unsigned bx = 0; bx < 3; ++bx)
                for (unsigned tz = 0; tz < 2; ++tz)
                    for (unsigned ty = 0; ty < 3; ++ty)
                        for (unsigned tx = 0; tx < 4; ++tx, ++id) {
                            unsigned want = tx | ty << 4 | tz << 8 | bx << 12 | by << 16 | bz << 20;
                            check.expect_eq(coords[id], want, "3-D coordinates");
                            weighted += static_cast<unsigned long long>(coords[id]) * (id + 1);
                        }
    check.expect_eq(count, total, "thread count");
    printf("where_am_i: %u threads, gridDim (%u,%u,%u), blockDim (%u,%u,%u)\n", count, dims[0], dims[1], dims[2],
           dims[3], dims[4], dims[5]);
    printf("where_am_i: coords[1] 0x%06x coords[4] 0x%06x coords[12] 0x%06x coords[24] 0x%06x last 0x%06x, weighted %llu\n",
           coords[1], coords[4], coords[12], coords[24], coords[total - 1], weighted);

    const int width = 77, height = 13;
    std::vector<int> img(width * height, -1);
    int* d_img;
    CUDA_CHECK(cudaMalloc(&d_img, img.size() * sizeof(int)));
    image<<<dim3((width + 15) / 16, (height + 3) / 4), dim3(16, 4)>>>(d_img, width, height);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(img.data(), d_img, img.size() * sizeof(int), cudaMemcpyDeviceToHost));
    long long sum = 0;
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) {
            check.expect_eq(img[y * width + x], x * 1000 + y, "2-D image");
            sum += img[y * width + x];
        }
    printf("image %dx%d: img[0][76] %d img[12][0] %d img[12][76] %d sum %lld\n", width, height, img[76],
           img[12 * width], img[12 * width + 76], sum);

    const int n = 1000;
    std::vector<int> lin(n);
    int* d_lin;
    CUDA_CHECK(cudaMalloc(&d_lin, n * sizeof(int)));
    int threads = 128;
    linear<<<(n + threads - 1) / threads, threads>>>(d_lin, n);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(lin.data(), d_lin, n * sizeof(int), cudaMemcpyDeviceToHost));
    long long lsum = 0;
    for (int i = 0; i < n; ++i) {
        check.expect_eq(lin[i], i * i - 3 * i, "1-D launch");
        lsum += lin[i];
    }
    printf("linear: n %d, out[999] %d, sum %lld\n", n, lin[n - 1], lsum);
    return check.finish();
}
