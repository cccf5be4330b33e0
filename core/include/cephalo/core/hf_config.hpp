#pragma once
// Hugging Face `config.json` files as model architectures. A job's model may be
// `{"hf_config": "path/to/config.json"}`; `cephalo describe model FILE` shows what was read.
//
// Each supported `model_type` is mapped to the ModelSpec of its real structure (grouped-query
// attention, rotary or learned or no positions, SwiGLU or GELU MLP, RMSNorm or LayerNorm with
// or without shift, which linear layers carry biases, tied or untied head), so that parameter
// counts equal the published ones exactly. Settings that change nothing the cost models price
// (rope scaling, partial rotary, parallel residual, ALiBi, dropout, init ranges) are accepted
// and recorded in `notes`; settings that would change cost and are not modelled (mixture of
// experts, a head_dim that is not hidden / heads, cross-attention, an embedding projection)
// are refused with a ValidationError naming the file, the key, the value and why.
#include <filesystem>
#include <string>
#include <vector>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/specs.hpp"

namespace cephalo {

struct HfModel {
  ModelSpec spec;
  std::string model_type;
  std::vector<std::string> notes;  // what was accepted but not priced, and why that is exact
};

// The model_types read_hf_config understands.
const std::vector<std::string>& supported_hf_model_types();

// Maps a parsed config.json (read from `file`, used in messages) to a ModelSpec named `name`.
HfModel parse_hf_config(const Json& config, const std::string& file, const std::string& name);

// Reads `file` (IoError when unreadable). The model is named after the file: its stem, or for
// a file called config.json its folder's name (the Hugging Face layout).
HfModel load_hf_config(const std::filesystem::path& file);

// The config a JSON value names (`"hf_config": "path"`, relative to `base_dir`), as a job or a
// catalog entry does. An unreadable config is a ValidationError at that value's path, so the
// message names the file and entry that pointed at it as well as the config's own path.
ModelSpec load_hf_config_named_by(const JsonReader& path_value,
                                  const std::filesystem::path& base_dir,
                                  const std::string& relative_to);

}  // namespace cephalo
