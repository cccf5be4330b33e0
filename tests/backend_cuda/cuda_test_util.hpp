#pragma once
// Helpers for the GPU suites: skipping without a device, device buffers filled from host
// vectors in any storage type, fresh random inputs, and the error measure of METHOD.md
// (||out - ref|| / ||ref||, NaN never passes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cephalo/backend/cuda/check.hpp"
#include "cephalo/backend/cuda/kernels.hpp"

#define CEPHALO_REQUIRE_CUDA_DEVICE()                      \
  do {                                                     \
    std::string cephalo_why_;                              \
    if (::cephalo::cuda::device_count(&cephalo_why_) == 0) \
      GTEST_SKIP() << "no CUDA device: " << cephalo_why_;  \
  } while (0)

namespace cephalo::cuda::testing {

inline const char* name(Dtype d) {
  switch (d) {
    case Dtype::FP32:
    case Dtype::TF32:
      return "fp32";
    case Dtype::BF16:
      return "bf16";
    case Dtype::FP16:
      return "fp16";
  }
  return "?";
}
inline int size_of(Dtype d) { return d == Dtype::FP32 || d == Dtype::TF32 ? 4 : 2; }
inline double tolerance(Dtype d) { return size_of(d) == 4 ? 1e-5 : 1e-2; }

// Fresh inputs every run (the seed is printed on failure through SCOPED_TRACE in callers).
inline std::uint64_t fresh_seed() {
  static std::random_device rd;
  return (std::uint64_t(rd()) << 32) ^ rd();
}

inline std::vector<float> random_vector(std::size_t n, std::mt19937_64& rng, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Owns device memory of n elements of `dtype`.
class DeviceArray {
 public:
  DeviceArray(std::size_t n, Dtype dtype) : n_(n), dtype_(dtype) {
    CEPHALO_CUDA_CHECK(cudaMalloc(&ptr_, n_ * size_of(dtype_) + 16));
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void* get() const { return ptr_; }
  // The buffer as the kernels take it: pointer, element count and storage type.
  backend::TensorRef ref() const {
    return {ptr_, static_cast<std::int64_t>(n_), backend::elem_type_of(dtype_)};
  }
  float* f32() const { return static_cast<float*>(ptr_); }
  std::size_t size() const { return n_; }
  Dtype dtype() const { return dtype_; }

  // Uploads fp32 values and rounds them to the storage type on the device. Returns the values
  // as stored (rounded), which is what a reference must be computed from.
  std::vector<float> set(const std::vector<float>& host) {
    EXPECT_EQ(host.size(), n_);
    float* staging = nullptr;
    CEPHALO_CUDA_CHECK(cudaMalloc(&staging, n_ * 4 + 16));
    CEPHALO_CUDA_CHECK(cudaMemcpy(staging, host.data(), n_ * 4, cudaMemcpyHostToDevice));
    cast(backend::TensorRef{staging, static_cast<std::int64_t>(n_), backend::ElemType::F32}, ref(),
         nullptr);
    CEPHALO_CUDA_CHECK(cudaDeviceSynchronize());
    CEPHALO_CUDA_CHECK(cudaFree(staging));
    return get_values();
  }
  std::vector<float> get_values() const {
    std::vector<float> out(n_);
    float* staging = nullptr;
    CEPHALO_CUDA_CHECK(cudaMalloc(&staging, n_ * 4 + 16));
    cast(ref(), backend::TensorRef{staging, static_cast<std::int64_t>(n_), backend::ElemType::F32},
         nullptr);
    CEPHALO_CUDA_CHECK(cudaDeviceSynchronize());
    CEPHALO_CUDA_CHECK(cudaMemcpy(out.data(), staging, n_ * 4, cudaMemcpyDeviceToHost));
    CEPHALO_CUDA_CHECK(cudaFree(staging));
    return out;
  }
  // Poison before a run: NaN everywhere, so an element the kernel fails to write is caught.
  void poison() {
    fill(ref(), std::nanf(""), nullptr);
    CEPHALO_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  void* ptr_ = nullptr;
  std::size_t n_ = 0;
  Dtype dtype_;
};

// Relative L2 error; +inf when any output is not finite (NaN never passes) or sizes differ.
inline double rel_error(const std::vector<float>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    const double d = double(out[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (den == 0.0) return std::sqrt(num);
  return std::sqrt(num / den);
}

inline std::vector<double> widen(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace cephalo::cuda::testing
