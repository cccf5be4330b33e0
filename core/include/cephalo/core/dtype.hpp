#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace cephalo {

// Numeric formats a job can train in. TF32 is an fp32 storage format computed on tensor cores.
enum class Dtype { FP32, TF32, FP16, BF16 };

std::string to_string(Dtype dtype);  // "fp32", "tf32", "fp16", "bf16"
// Every spelling dtype_spellings() lists: the short names, their long names, and PyTorch's
// (`torch.bfloat16`, `torch.half`, ...), as Hugging Face configs and Python users write them.
std::optional<Dtype> parse_dtype(std::string_view text);
// "fp32 (float32, float, torch.float32, torch.float), tf32, fp16 (...), bf16 (...)": what a
// refusal of a dtype names as expected; `compute_only` leaves tf32 out (a storage format the
// callers that price a layer do not take).
std::string dtype_spellings(bool compute_only = false);
int bytes_per_element(Dtype dtype);  // storage size (TF32 is stored as fp32)

}  // namespace cephalo
