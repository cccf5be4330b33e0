#include "cephalo/core/specs.hpp"

#include "cephalo/core/checked.hpp"

namespace cephalo {

double DeviceSpec::peak_flops(Dtype dtype) const {
  double peak = 0;
  switch (dtype) {
    case Dtype::FP32:
      peak = peak_fp32;
      break;
    case Dtype::TF32:
      peak = peak_tf32;
      break;
    case Dtype::FP16:
      peak = peak_fp16;
      break;
    case Dtype::BF16:
      peak = peak_bf16;
      break;
  }
  return peak > 0 ? peak : peak_fp32;
}

double DeviceSpec::pcie_bandwidth() const {
  // Usable bytes/s per lane and direction after line coding (128b/130b from gen 3 on).
  double per_lane = 0;
  switch (pcie_generation) {
    case 1:
      per_lane = 0.25e9;
      break;
    case 2:
      per_lane = 0.5e9;
      break;
    case 3:
      per_lane = 0.985e9;
      break;
    case 4:
      per_lane = 1.969e9;
      break;
    case 5:
      per_lane = 3.938e9;
      break;
    case 6:
      per_lane = 7.563e9;
      break;
    default:
      per_lane = 0;
  }
  return per_lane * (pcie_lanes > 0 ? pcie_lanes : 16);
}

DeviceSpec parse_device_spec(JsonReader& reader) {
  if (!reader.is_object()) reader.fail("an object describing a device");
  DeviceSpec spec;
  spec.name = reader.name("name");
  spec.kind = reader.has("kind") ? reader.child("kind").as_enum({"gpu", "cpu"}) : "gpu";
  spec.memory_bytes = reader.quantity_in("memory", Quantity::Bytes, kMemoryCapacityRange.lo,
                                         kMemoryCapacityRange.hi);
  spec.memory_bandwidth = reader.quantity_in("memory_bandwidth", Quantity::Bandwidth,
                                             kMemoryBandwidthRange.lo, kMemoryBandwidthRange.hi);
  spec.peak_fp32 =
      reader.quantity_in("peak_fp32", Quantity::FlopRate, kFlopRateRange.lo, kFlopRateRange.hi);
  // The other peaks are optional; 0 means "not accelerated" (peak_flops falls back to fp32).
  auto optional_peak = [&](const char* key) {
    auto c = reader.optional_child(key);
    if (!c) return 0.0;
    const double v = c->as_quantity(Quantity::FlopRate);
    return v == 0 ? 0.0
                  : c->as_quantity_in(Quantity::FlopRate, kFlopRateRange.lo, kFlopRateRange.hi);
  };
  spec.peak_tf32 = optional_peak("peak_tf32");
  spec.peak_fp16 = optional_peak("peak_fp16");
  spec.peak_bf16 = optional_peak("peak_bf16");
  spec.pcie_generation = static_cast<int>(reader.integer_or("pcie_generation", 3, 1, 6));
  spec.pcie_lanes = static_cast<int>(reader.integer_or("pcie_lanes", 16, 1, 32));
  if (auto nv = reader.optional_child("nvlink_bandwidth")) {
    const double v = nv->as_quantity(Quantity::Bandwidth);  // 0: no NVLink
    spec.nvlink_bandwidth = v == 0 ? 0.0
                                   : nv->as_quantity_in(Quantity::Bandwidth, kLinkBandwidthRange.lo,
                                                        kLinkBandwidthRange.hi);
  }
  if (auto price = reader.optional_child("price_per_hour")) {
    spec.price_per_hour = price->as_number();
    if (!(spec.price_per_hour >= kPriceRange.lo && spec.price_per_hour <= kPriceRange.hi))
      price->fail("a price in USD per hour from 0 to 10000");
  }
  if (auto tdp = reader.optional_child("tdp_watts")) {
    spec.tdp_watts = tdp->as_number();
    if (!(spec.tdp_watts > 0 && spec.tdp_watts <= 1e5))
      tdp->fail("a board power limit in watts, > 0 and <= 100000");
  }
  if (auto a = reader.optional_child("architecture"))
    spec.architecture =
        a->as_enum({"pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "cpu"});
  spec.sm_count = static_cast<int>(reader.integer_or("sm_count", 0, 1, 100000));
  if (auto c = reader.optional_child("boost_clock_mhz")) {
    spec.boost_clock_hz = c->as_number() * 1e6;
    if (!(spec.boost_clock_hz > 0 && spec.boost_clock_hz < 1e10))
      c->fail("a boost clock in MHz, > 0 and < 10000");
  }
  spec.l2_bytes = reader.optional_quantity("l2_cache", Quantity::Bytes).value_or(0);
  spec.source = reader.string_or("source", "");
  reader.finish();
  return spec;
}

Json to_json(const DeviceSpec& spec) {
  Json j = {{"name", spec.name},
            {"kind", spec.kind},
            {"memory", spec.memory_bytes},
            {"memory_bandwidth", spec.memory_bandwidth},
            {"peak_fp32", spec.peak_fp32},
            {"peak_tf32", spec.peak_tf32},
            {"peak_fp16", spec.peak_fp16},
            {"peak_bf16", spec.peak_bf16},
            {"pcie_generation", spec.pcie_generation},
            {"pcie_lanes", spec.pcie_lanes},
            {"nvlink_bandwidth", spec.nvlink_bandwidth}};
  if (spec.price_per_hour >= 0) j["price_per_hour"] = spec.price_per_hour;
  if (spec.tdp_watts > 0) j["tdp_watts"] = spec.tdp_watts;
  if (!spec.architecture.empty()) j["architecture"] = spec.architecture;
  if (spec.sm_count > 0) j["sm_count"] = spec.sm_count;
  if (spec.boost_clock_hz > 0) j["boost_clock_mhz"] = spec.boost_clock_hz / 1e6;
  if (spec.l2_bytes > 0) j["l2_cache"] = spec.l2_bytes;
  if (!spec.source.empty()) j["source"] = spec.source;
  return j;
}

ModelSpec parse_model_spec(JsonReader& reader) {
  if (!reader.is_object()) reader.fail("an object describing a model architecture");
  ModelSpec m;
  m.name = reader.name("name");
  m.family = reader.child("family").as_enum({"gpt", "llama", "bert", "vit"});
  constexpr std::int64_t kBig = kMaxModelWidth;
  m.num_layers = static_cast<int>(reader.integer("layers", 1, kMaxModelLayers));
  m.hidden = static_cast<int>(reader.integer("hidden", 1, kBig));
  m.heads = static_cast<int>(reader.integer("heads", 1, kBig));
  if (m.hidden % m.heads != 0)
    reader.child("heads").fail("a divisor of hidden (" + std::to_string(m.hidden) + ")");
  m.kv_heads = static_cast<int>(reader.integer_or("kv_heads", m.heads, 1, m.heads));
  if (m.heads % m.kv_heads != 0) reader.child("kv_heads").fail("a divisor of heads");
  m.activation = reader.has("activation")
                     ? reader.child("activation").as_enum({"gelu", "relu", "swiglu"})
                     : (m.family == "llama" ? "swiglu" : "gelu");
  m.norm = reader.has("norm") ? reader.child("norm").as_enum({"layernorm", "rmsnorm"})
                              : (m.family == "llama" ? "rmsnorm" : "layernorm");
  m.ffn_hidden = reader.has("ffn_hidden")
                     ? static_cast<int>(reader.integer("ffn_hidden", 1, kBig))
                     : static_cast<int>(checked_product(reader.child("hidden"),
                                                        "the default MLP width (ffn_hidden)",
                                                        {{"", 4}, {"hidden", m.hidden}}, kBig));
  const bool bias = reader.boolean_or("bias", m.family != "llama");
  m.qkv_bias = reader.boolean_or("qkv_bias", bias);
  m.out_bias = reader.boolean_or("out_bias", bias);
  m.mlp_bias = reader.boolean_or("mlp_bias", bias);
  if (reader.has("norm_bias") && m.norm != "layernorm")
    reader.child("norm_bias")
        .fail("no norm_bias with \"norm\": \"" + m.norm + "\" (only a LayerNorm has a shift)");
  m.norm_bias = m.norm == "layernorm" && reader.boolean_or("norm_bias", true);
  m.attention_window =
      static_cast<int>(reader.integer_or("attention_window", 0, 0, std::int64_t{1} << 22));
  m.tied_embeddings = reader.boolean_or("tied_embeddings", m.family == "gpt");
  if (m.family == "vit") {
    m.image_size = static_cast<int>(reader.integer("image_size", 1, 1 << 16));
    m.patch_size = static_cast<int>(reader.integer("patch_size", 1, m.image_size));
    m.channels = static_cast<int>(reader.integer_or("channels", 3, 1, 64));
    m.num_classes = static_cast<int>(reader.integer_or("num_classes", 1000, 1, kBig));
    m.vocab_size = 0;
    m.max_positions = static_cast<int>(reader.integer_or("max_positions", 0, 0, kBig));
  } else {
    m.vocab_size = static_cast<int>(reader.integer("vocab_size", 1, kBig));
    m.max_positions = static_cast<int>(
        reader.integer_or("max_positions", m.family == "llama" ? 0 : 2048, 0, kBig));
  }
  if (reader.has("position_offset")) {
    if (m.max_positions == 0)
      reader.child("position_offset").fail("no position_offset without learned max_positions");
    m.position_offset = static_cast<int>(reader.integer("position_offset", 0, m.max_positions - 1));
  }
  if (auto aliases = reader.optional_child("aliases"))
    for (auto& a : aliases->elements()) m.aliases.push_back(a.as_string());
  m.source = reader.string_or("source", "");
  reader.finish();
  check_model_sizes(m, m.family == "vit" ? reader.child("image_size") : reader);
  return m;
}

std::string sequence_refusal(const ModelSpec& m, std::int64_t seq) {
  if (const int limit = max_sequence(m); limit > 0 && seq > limit && m.family != "vit")
    return "at most the model's max_positions (" + std::to_string(m.max_positions) +
           (m.position_offset > 0 ? " less " + std::to_string(m.position_offset) +
                                        " offset rows: " + std::to_string(limit) + " tokens"
                                  : std::string()) +
           ")";
  return "";
}

void check_model_sizes(const ModelSpec& m, const JsonReader& where) {
  if (m.family == "vit" && m.patch_size > 0) {
    const std::int64_t side = m.image_size / m.patch_size;
    checked_product(
        where, "a ViT patch count (image_size / patch_size)², its sequence less the class token,",
        {{"(image_size / patch_size)", side}, {"(image_size / patch_size)", side}},
        kMaxSequenceLength - 1);
  }
}

Json to_json(const ModelSpec& m) {
  Json j = {{"name", m.name},
            {"family", m.family},
            {"layers", m.num_layers},
            {"hidden", m.hidden},
            {"heads", m.heads},
            {"kv_heads", m.kv_heads},
            {"ffn_hidden", m.ffn_hidden},
            {"activation", m.activation},
            {"norm", m.norm},
            {"tied_embeddings", m.tied_embeddings},
            {"max_positions", m.max_positions}};
  // One "bias" when the parts agree (every catalog model), else each part.
  if (m.qkv_bias == m.out_bias && m.out_bias == m.mlp_bias) {
    j["bias"] = m.qkv_bias;
  } else {
    j["qkv_bias"] = m.qkv_bias;
    j["out_bias"] = m.out_bias;
    j["mlp_bias"] = m.mlp_bias;
  }
  if (m.norm == "layernorm" && !m.norm_bias) j["norm_bias"] = false;
  if (m.position_offset > 0) j["position_offset"] = m.position_offset;
  if (m.attention_window > 0) j["attention_window"] = m.attention_window;
  if (m.family == "vit") {
    j["image_size"] = m.image_size;
    j["patch_size"] = m.patch_size;
    j["channels"] = m.channels;
    j["num_classes"] = m.num_classes;
  } else {
    j["vocab_size"] = m.vocab_size;
  }
  if (!m.source.empty()) j["source"] = m.source;
  return j;
}

LinkSpec parse_link_spec(JsonReader& reader) {
  if (!reader.is_object()) reader.fail("an object describing a link");
  LinkSpec link;
  link.kind = reader.child("kind").as_enum({"pcie", "nvlink", "ethernet", "infiniband", "shm"});
  if (link.kind == "pcie" && !reader.has("bandwidth")) {
    DeviceSpec pcie;  // reuse the generation table
    pcie.pcie_generation = static_cast<int>(reader.integer("generation", 1, 6));
    pcie.pcie_lanes = static_cast<int>(reader.integer_or("lanes", 16, 1, 32));
    link.bandwidth = pcie.pcie_bandwidth();
  } else {
    link.bandwidth = reader.quantity_in("bandwidth", Quantity::Bandwidth, kLinkBandwidthRange.lo,
                                        kLinkBandwidthRange.hi);
  }
  double default_latency = link.kind == "nvlink" ? 2e-6 : link.kind == "pcie" ? 5e-6 : 10e-6;
  link.latency = reader.has("latency")
                     ? reader.quantity_in("latency", Quantity::Seconds, kLinkLatencyRange.lo,
                                          kLinkLatencyRange.hi)
                     : default_latency;
  reader.finish();
  return link;
}

Json to_json(const LinkSpec& link) {
  return {{"kind", link.kind}, {"bandwidth", link.bandwidth}, {"latency", link.latency}};
}

}  // namespace cephalo
