#include "cephalo/core/dtype.hpp"

#include <array>

namespace cephalo {

namespace {

struct Spelling {
  Dtype dtype;
  std::array<std::string_view, 5> names;  // the short name first; "" pads
};

// One table for parsing and for the messages that list what parses: a spelling added here is
// accepted and named everywhere a dtype is read (jobs, profiles, configs, flags, Python).
constexpr std::array<Spelling, 4> kSpellings{{
    {Dtype::FP32, {"fp32", "float32", "float", "torch.float32", "torch.float"}},
    {Dtype::TF32, {"tf32", "", "", "", ""}},
    {Dtype::FP16, {"fp16", "float16", "half", "torch.float16", "torch.half"}},
    {Dtype::BF16, {"bf16", "bfloat16", "torch.bfloat16", "", ""}},
}};

}  // namespace

std::string to_string(Dtype dtype) {
  switch (dtype) {
    case Dtype::FP32:
      return "fp32";
    case Dtype::TF32:
      return "tf32";
    case Dtype::FP16:
      return "fp16";
    case Dtype::BF16:
      return "bf16";
  }
  return "?";
}

std::optional<Dtype> parse_dtype(std::string_view text) {
  if (text.empty()) return std::nullopt;
  for (const auto& s : kSpellings)
    for (const auto name : s.names)
      if (name == text) return s.dtype;
  return std::nullopt;
}

std::string dtype_spellings(bool compute_only) {
  std::string out;
  for (const auto& s : kSpellings) {
    if (compute_only && s.dtype == Dtype::TF32) continue;
    out += (out.empty() ? "" : ", ") + std::string(s.names[0]);
    std::string others;
    for (std::size_t i = 1; i < s.names.size(); ++i)
      if (!s.names[i].empty()) others += (others.empty() ? "" : ", ") + std::string(s.names[i]);
    if (!others.empty()) out += " (" + others + ")";
  }
  return out;
}

int bytes_per_element(Dtype dtype) {
  return (dtype == Dtype::FP16 || dtype == Dtype::BF16) ? 2 : 4;
}

}  // namespace cephalo
