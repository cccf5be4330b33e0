#pragma once
#include <string>
#include <string_view>
#include <optional>

namespace cephalo {

// Numeric formats a job can train in. TF32 is an fp32 storage format computed on tensor cores.
enum class Dtype { FP32, TF32, FP16, BF16 };

std::string to_string(Dtype dtype);                        // "fp32", "tf32", "fp16", "bf16"
std::optional<Dtype> parse_dtype(std::string_view text);  // also "float32", "float16", "bfloat16"
int bytes_per_element(Dtype dtype);                        // storage size (TF32 is stored as fp32)

}  // namespace cephalo
