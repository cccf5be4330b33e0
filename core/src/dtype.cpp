#include "cephalo/core/dtype.hpp"

namespace cephalo {

std::string to_string(Dtype dtype) {
  switch (dtype) {
    case Dtype::FP32: return "fp32";
    case Dtype::TF32: return "tf32";
    case Dtype::FP16: return "fp16";
    case Dtype::BF16: return "bf16";
  }
  return "?";
}

std::optional<Dtype> parse_dtype(std::string_view text) {
  if (text == "fp32" || text == "float32" || text == "float") return Dtype::FP32;
  if (text == "tf32") return Dtype::TF32;
  if (text == "fp16" || text == "float16" || text == "half") return Dtype::FP16;
  if (text == "bf16" || text == "bfloat16") return Dtype::BF16;
  return std::nullopt;
}

int bytes_per_element(Dtype dtype) {
  return (dtype == Dtype::FP16 || dtype == Dtype::BF16) ? 2 : 4;
}

}  // namespace cephalo
