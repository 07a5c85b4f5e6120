// The inner loop of radix-cache matching: how many leading token ids two keys share.
// Built just in time by minisgl/kernel/radix.py with `g++ -O2 -shared -fPIC` and called through
// ctypes; keys are contiguous int32 arrays (numpy), passed as pointer + length.

#include <algorithm>
#include <cstdint>

extern "C" int64_t minisgl_fast_compare_key(const int32_t* a, int64_t len_a,
                                            const int32_t* b, int64_t len_b) {
    const int64_t n = std::min(len_a, len_b);
    if (n <= 0) {
        return 0;  // empty arrays may come with a dangling pointer: never touch it
    }
    return std::mismatch(a, a + n, b).first - a;
}
