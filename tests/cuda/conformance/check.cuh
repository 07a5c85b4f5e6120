// Shared helpers of the conformance programs: an error-checking macro and a result checker.
// Every program prints deterministic values (no timings, no pointers) and ends with the line
// "conformance <name>: ok" when all its own checks against a CPU computation hold.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CUDA_CHECK(call)                                                                   \
    do {                                                                                   \
        cudaError_t err_ = (call);                                                         \
        if (err_ != cudaSuccess) {                                                         \
            printf("CUDA error \"%s\" at line %d\n", cudaGetErrorString(err_), __LINE__);  \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

struct Checker {
    const char* name;
    int failures = 0;
    explicit Checker(const char* n) : name(n) {}
    // Records one comparison; prints it only when it fails.
    void expect(bool ok, const char* what, long long got = 0, long long want = 0) {
        if (ok) return;
        ++failures;
        printf("MISMATCH in %s: %s (got %lld, want %lld)\n", name, what, got, want);
    }
    void expect_eq(long long got, long long want, const char* what) { expect(got == want, what, got, want); }
    int finish() const {
        if (failures) {
            printf("conformance %s: %d mismatches\n", name, failures);
            return 1;
        }
        printf("conformance %s: ok\n", name);
        return 0;
    }
};
