#pragma once
// Non-owning views of memory that lives on a device (or in pinned host memory). Kernels and
// collectives take views so that a weight can be a slice of a unit's flat parameter buffer
// without copies. A view never frees anything; Buffer (device.hpp) owns memory.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cephalo/core/dtype.hpp"

namespace cephalo::backend {

// Element types a kernel can see. Token ids and targets are I32; everything else is floating.
enum class ElemType { F32, F16, BF16, I32 };

inline std::size_t element_size(ElemType t) {
  switch (t) {
    case ElemType::F32:
    case ElemType::I32:
      return 4;
    case ElemType::F16:
    case ElemType::BF16:
      return 2;
  }
  return 4;
}

inline const char* to_string(ElemType t) {
  switch (t) {
    case ElemType::F32:
      return "f32";
    case ElemType::F16:
      return "f16";
    case ElemType::BF16:
      return "bf16";
    case ElemType::I32:
      return "i32";
  }
  return "?";
}

// Compute dtype of a job -> element type of activations and gathered parameters.
// TF32 is stored as fp32 (the GEMM may use tensor cores, which is the device's business).
inline ElemType elem_type_of(Dtype d) {
  switch (d) {
    case Dtype::FP32:
    case Dtype::TF32:
      return ElemType::F32;
    case Dtype::FP16:
      return ElemType::F16;
    case Dtype::BF16:
      return ElemType::BF16;
  }
  return ElemType::F32;
}

// Copies `bytes` between host-addressable buffers (the CPU device, pinned host memory), nothing
// when `bytes` is 0: an empty view's pointer may be null (a rank without samples or without
// state), and memcpy from or to a null pointer is undefined even for zero bytes.
inline void copy_host_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

// A contiguous run of `numel` elements of `type` at `data`, on the device that allocated it.
struct TensorRef {
  void* data = nullptr;
  std::int64_t numel = 0;
  ElemType type = ElemType::F32;

  std::size_t bytes() const { return static_cast<std::size_t>(numel) * element_size(type); }
  bool empty() const { return numel == 0; }
  // Sub-range [offset, offset + count) in elements; checked, because a wrong slice of a flat
  // parameter buffer silently corrupts a neighbouring weight.
  TensorRef slice(std::int64_t offset, std::int64_t count) const {
    if (offset < 0 || count < 0 || offset + count > numel)
      throw std::out_of_range("TensorRef::slice [" + std::to_string(offset) + ", +" +
                              std::to_string(count) + ") outside " + std::to_string(numel) +
                              " elements");
    return {static_cast<char*>(data) + static_cast<std::size_t>(offset) * element_size(type), count,
            type};
  }
  // Typed host pointers; only meaningful for host-addressable memory (CPU device, pinned host).
  float* f32() const { return static_cast<float*>(data); }
  std::int32_t* i32() const { return static_cast<std::int32_t*>(data); }
};

}  // namespace cephalo::backend
