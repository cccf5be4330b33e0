#include "cephalo/core/checked.hpp"

#include <limits>

namespace cephalo {
namespace {

// "d_model 65536 × expansion_ratio 65536 = 4294967296" (or "= more than 2^63" on overflow).
std::string spell(std::initializer_list<Operand> operands, const char* sign, bool overflow,
                  std::int64_t result) {
  std::string out;
  for (const auto& o : operands) {
    if (!out.empty()) out += sign;
    out += o.name.empty() ? std::to_string(o.value) : o.name + " " + std::to_string(o.value);
  }
  return out + (overflow ? " = more than 2^63" : " = " + std::to_string(result));
}

[[noreturn]] void refuse(const std::string& file, const std::string& json_path,
                         const std::string& what, std::initializer_list<Operand> operands,
                         const char* sign, bool overflow, std::int64_t result, std::int64_t max) {
  throw ValidationError(file, json_path, clip(spell(operands, sign, overflow, result), 1000),
                        what + " at most " + std::to_string(max));
}

void refuse_negative(const std::string& file, const std::string& json_path, const std::string& what,
                     std::initializer_list<Operand> operands) {
  for (const auto& o : operands)
    if (o.value < 0)
      throw ValidationError(file, json_path, o.name + " " + std::to_string(o.value),
                            "a count >= 0 (it is a factor of " + what + ")");
}

}  // namespace

std::int64_t checked_product(const std::string& file, const std::string& json_path,
                             const std::string& what, std::initializer_list<Operand> operands,
                             std::int64_t max) {
  refuse_negative(file, json_path, what, operands);
  std::int64_t result = 1;
  bool overflow = false;
  for (const auto& o : operands) {
    std::int64_t next = 0;
    if (__builtin_mul_overflow(result, o.value, &next)) {
      overflow = true;
      break;
    }
    result = next;
  }
  // A zero operand after an overflow still makes the true product 0.
  for (const auto& o : operands)
    if (o.value == 0) return 0;
  if (overflow || result > max)
    refuse(file, json_path, what, operands, " × ", overflow, result, max);
  return result;
}

std::int64_t checked_sum(const std::string& file, const std::string& json_path,
                         const std::string& what, std::initializer_list<Operand> operands,
                         std::int64_t max) {
  refuse_negative(file, json_path, what, operands);
  std::int64_t result = 0;
  bool overflow = false;
  for (const auto& o : operands)
    if (__builtin_add_overflow(result, o.value, &result)) {
      overflow = true;
      break;
    }
  if (overflow || result > max)
    refuse(file, json_path, what, operands, " + ", overflow, result, max);
  return result;
}

std::int64_t checked_product(const JsonReader& where, const std::string& what,
                             std::initializer_list<Operand> operands, std::int64_t max) {
  return checked_product(where.file(), where.where(), what, operands, max);
}

std::int64_t checked_sum(const JsonReader& where, const std::string& what,
                         std::initializer_list<Operand> operands, std::int64_t max) {
  return checked_sum(where.file(), where.where(), what, operands, max);
}

}  // namespace cephalo
