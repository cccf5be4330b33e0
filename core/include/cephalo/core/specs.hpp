#pragma once
// Hardware and model descriptions shared by all libraries. The catalogs in costmodels/ hold
// named instances; clusters and jobs may also give them inline. Parsing lives here so inline
// specs and catalog entries are read by the same code.
#include <optional>
#include <string>
#include <vector>

#include "cephalo/core/dtype.hpp"
#include "cephalo/core/json_reader.hpp"

namespace cephalo {

// Physically meaningful ranges for hardware quantities, checked wherever a spec is read
// (catalogs and inline specs alike). They are wide (from a slow CPU socket to ten times
// today's fastest parts) but keep every derived time finite: a bandwidth of 1e-320 B/s or a
// FLOP rate of 1e-30 is a typo, and would reach the simulator as an infinite duration.
struct PhysicalRange {
  double lo, hi;
};
constexpr PhysicalRange kLinkBandwidthRange{1e6, 1e14};  // 1 MB/s to 100 TB/s
constexpr PhysicalRange kLinkLatencyRange{0.0, 1.0};     // 0 to 1 s
constexpr PhysicalRange kMemoryCapacityRange{1024.0 * 1024.0, 1125899906842624.0};  // 1 MiB-1 PiB
constexpr PhysicalRange kMemoryBandwidthRange{1e6, 1e14};  // 1 MB/s to 100 TB/s
constexpr PhysicalRange kFlopRateRange{1e6, 1e18};         // 1 MFLOP/s to 1 EFLOP/s
constexpr PhysicalRange kPriceRange{0.0, 1e4};             // USD per device-hour

// One accelerator (or CPU socket used as a device) as its datasheet describes it.
struct DeviceSpec {
  std::string name;             // canonical catalog name, e.g. "A100-80GB"
  std::string kind = "gpu";     // "gpu" or "cpu"
  double memory_bytes = 0;      // device memory capacity
  double memory_bandwidth = 0;  // bytes/s
  double peak_fp32 = 0;         // dense FLOP/s, 0 when unsupported
  double peak_tf32 = 0;
  double peak_fp16 = 0;
  double peak_bf16 = 0;
  int pcie_generation = 0;  // host link
  int pcie_lanes = 0;
  double nvlink_bandwidth = 0;  // bytes/s per GPU, per direction; 0 without NVLink
  double price_per_hour = -1;   // on-demand USD per device-hour; < 0 when none is public
  double tdp_watts = 0;         // board power limit (TDP) in W; 0 when not given
  // For the op-level compute model (costmodels/README.md); 0 / empty when not given inline.
  std::string architecture;   // generation: pascal, volta, turing, ampere, ada, hopper, blackwell
  int sm_count = 0;           // streaming multiprocessors (GEMM tiles run in waves over them)
  double boost_clock_hz = 0;  // datasheet boost clock
  double l2_bytes = 0;        // L2 cache
  std::string source;         // where the numbers come from

  // Dense peak for a compute dtype; falls back to fp32 when the format is not accelerated.
  double peak_flops(Dtype dtype) const;
  // Host link bandwidth from PCIe generation and lanes (bytes/s per direction).
  double pcie_bandwidth() const;

  bool operator==(const DeviceSpec&) const = default;
};

// Reads a device spec object (all fields named as in DeviceSpec, quantities with units).
DeviceSpec parse_device_spec(JsonReader& reader);
Json to_json(const DeviceSpec& spec);

// Transformer architecture. Derived counts (parameters, FLOPs) live in costmodels/.
struct ModelSpec {
  std::string name;
  std::string family = "gpt";  // "gpt", "llama", "bert", "vit"
  int num_layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;                 // == heads without grouped-query attention
  int ffn_hidden = 0;               // MLP inner size
  int vocab_size = 0;               // 0 for ViT
  int max_positions = 0;            // learned position embeddings (0: rotary, none stored)
  int position_offset = 0;          // of those, rows no token reaches (OPT: 2, max_sequence)
  std::string activation = "gelu";  // "gelu", "relu" or "swiglu"
  std::string norm = "layernorm";   // "layernorm" or "rmsnorm"
  // Biases of the linear layers, by part (the JSON key "bias" sets all three; Qwen2 has only
  // the q/k/v ones), and LayerNorm's shift (MPT drops it; RMSNorm never has one).
  bool qkv_bias = true;
  bool out_bias = true;  // attention output projection
  bool mlp_bias = true;
  bool norm_bias = true;
  // Sliding-window attention span in tokens (0: full attention): each query attends to at most
  // this many keys (itself and the previous ones), which flash attention's FLOPs follow; eager
  // attention still materialises the masked s×s scores (costmodels/README.md).
  int attention_window = 0;
  bool tied_embeddings = true;  // head shares the token embedding
  int image_size = 0;           // ViT only
  int patch_size = 0;           // ViT only
  int channels = 3;             // ViT only
  int num_classes = 0;          // ViT only
  std::vector<std::string> aliases;
  std::string source;
  // A Hugging Face config's torch_dtype (the checkpoint's dtype): a job that names the config
  // computes in it unless its "precision" says otherwise (parse_job). Not part of the JSON.
  std::optional<Dtype> checkpoint_dtype;
};

// The longest sequence the model can run: its learned positions less the offset rows (0: no
// stored positions, so the job alone limits it). OPT stores max_position_embeddings + 2 rows
// (Hugging Face's padding offset) and runs max_position_embeddings tokens.
inline int max_sequence(const ModelSpec& m) {
  return m.max_positions > 0 ? m.max_positions - m.position_offset : 0;
}

ModelSpec parse_model_spec(JsonReader& reader);
Json to_json(const ModelSpec& spec);

// A link between two endpoints, in the α-β sense: time = latency + bytes / bandwidth.
struct LinkSpec {
  std::string kind = "pcie";  // "pcie", "nvlink", "ethernet", "infiniband", "shm"
  double bandwidth = 0;       // bytes/s per direction
  double latency = 0;         // seconds
};

LinkSpec parse_link_spec(JsonReader& reader);
Json to_json(const LinkSpec& link);

}  // namespace cephalo
