// Hugging Face config.json reader (core/hf_config.hpp): load_hf_config maps every supported
// model_type to a ModelSpec, with checked arithmetic on every derived width (core/checked.hpp).
// An accepted config must give only positive sizes within the bounds: a wrapped width that
// slipped through is a finding (abort), not only a crash.
#include <cstdlib>

#include "cephalo/core/checked.hpp"
#include "cephalo/core/hf_config.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return cephalo::fuzz::read_bytes(data, size, "config.json", [](const auto& file) {
    const auto hf = cephalo::load_hf_config(file);
    const auto& m = hf.spec;
    for (int v : {m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.num_layers})
      if (v <= 0 || v > cephalo::kMaxModelWidth) std::abort();
    if (m.family == "vit") {
      const long long side = m.image_size / m.patch_size;
      if (side * side + 1 > cephalo::kMaxSequenceLength) std::abort();
    } else if (m.vocab_size <= 0) {
      std::abort();
    }
  });
}
