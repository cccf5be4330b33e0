#pragma once
// Checked arithmetic on user-given integers. Every product or sum of numbers a user wrote
// (widths, heads, vocabulary, patches, sequence, batch, counts) that is stored as an integer
// goes through these, so a size never wraps: a result above its bound, or one that would not
// fit in 64 bits, is a ValidationError naming the file, the JSON path, every operand and the
// bound, instead of a negative width that `describe` and `predict` would print as if valid.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/specs.hpp"

namespace cephalo {

// Bounds on user integers, the same for inline specs, catalogs, Hugging Face configs and jobs:
// every model width (hidden, heads, MLP, vocabulary, positions, classes), including those
// derived by a product (MPT's d_model × expansion_ratio, GPT-2's default n_inner = 4 × n_embd).
constexpr std::int64_t kMaxModelWidth = std::int64_t{1} << 24;
constexpr std::int64_t kMaxModelLayers = 100000;
// The longest sequence a job may run, and so the most patches (less the class token) a ViT
// image may have: ViT's sequence is (image_size / patch_size)² + 1.
constexpr std::int64_t kMaxSequenceLength = std::int64_t{1} << 22;
constexpr std::int64_t kMaxGlobalBatch = std::int64_t{1} << 24;

// One operand: what the input calls it (a key, or a derived quantity; empty for a constant)
// and its value (>= 0).
struct Operand {
  std::string name;
  std::int64_t value = 0;
};

// The product of `operands`, at most `max`. `what` names the result in the message ("the MLP
// width"). ValidationError at `where` (its file and path) when the product exceeds `max` or
// overflows, or when an operand is negative.
std::int64_t checked_product(const JsonReader& where, const std::string& what,
                             std::initializer_list<Operand> operands, std::int64_t max);

// The sum of `operands`, at most `max`; same failures as checked_product.
std::int64_t checked_sum(const JsonReader& where, const std::string& what,
                         std::initializer_list<Operand> operands, std::int64_t max);

// The same checks for values that have no JSON reader at hand (a file and a JSON path).
std::int64_t checked_product(const std::string& file, const std::string& json_path,
                             const std::string& what, std::initializer_list<Operand> operands,
                             std::int64_t max);
std::int64_t checked_sum(const std::string& file, const std::string& json_path,
                         const std::string& what, std::initializer_list<Operand> operands,
                         std::int64_t max);

// The sizes the cost models derive from a spec by products of its integers (ViT's patch count),
// checked as above: a ValidationError at `where` naming the operands when one is out of bounds.
// parse_model_spec and the Hugging Face reader call it, so no wrapped or negative size reaches
// a cost model.
void check_model_sizes(const ModelSpec& spec, const JsonReader& where);

// Why a job may not run `seq` tokens of `model` ("" when it may): past its learned positions
// (not ViT, whose sequence is its patches); a sliding window is priced, not refused. The one rule that
// parse_job and `predict layer` both apply.
std::string sequence_refusal(const ModelSpec& model, std::int64_t seq);

}  // namespace cephalo
