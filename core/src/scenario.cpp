#include "cephalo/core/scenario.hpp"

#include "cephalo/core/checked.hpp"
#include "cephalo/core/hf_config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <unordered_map>

namespace cephalo {
namespace {

DeviceSlot parse_slot_type(JsonReader& reader, const SpecLookup& lookup, const std::string& name) {
  auto spec = lookup.find_device(name);
  if (!spec) {
    auto close = closest_names(name, lookup.device_names());
    std::string expected = "a GPU from the catalog (`cephalo describe gpus`)";
    if (!close.empty()) {
      expected += "; closest: ";
      for (std::size_t i = 0; i < close.size(); ++i) expected += (i ? ", " : "") + close[i];
    }
    reader.fail_value("unknown GPU \"" + name + "\"", expected);
  }
  DeviceSlot slot;
  slot.type = name;
  slot.spec = *spec;
  return slot;
}

// One entry of a node's "gpus" list: a name, or {type|spec, count, slowdown, threads}.
std::vector<DeviceSlot> parse_device_entry(JsonReader& entry, const SpecLookup& lookup) {
  if (entry.is_string()) return {parse_slot_type(entry, lookup, entry.as_string())};
  if (!entry.is_object())
    entry.fail("a GPU name or an object {\"type\": NAME, \"count\": N} or {\"spec\": {...}}");
  DeviceSlot slot;
  if (entry.has("type") && entry.has("spec"))
    entry.child("spec").fail("either \"type\" or \"spec\", not both");
  if (entry.has("type")) {
    auto type = entry.child("type");
    slot = parse_slot_type(type, lookup, type.as_string());
  } else if (entry.has("spec")) {
    auto spec = entry.child("spec");
    slot.spec = parse_device_spec(spec);
    slot.type = slot.spec.name;
  } else {
    entry.fail("an object with \"type\" (catalog name) or \"spec\" (inline device)");
  }
  auto count = entry.integer_or("count", 1, 1, kMaxDevices);
  if (auto s = entry.optional_child("slowdown")) {
    slot.slowdown = s->as_number();
    if (slot.slowdown < 1.0 || slot.slowdown > 1000.0)
      s->fail("an emulated slowdown factor from 1 to 1000");
  }
  slot.threads = static_cast<int>(entry.integer_or("threads", 0, 0, 1024));
  entry.finish();
  return std::vector<DeviceSlot>(static_cast<std::size_t>(count), slot);
}

// Sums the devices every node asks for without creating any, so an absurd total (200 entries
// of 131072 GPUs in a 7 KB file) is refused before memory is spent on it. Entries this pass
// cannot read are left to the full parse, which reports them at their path.
void check_device_total(JsonReader& nodes) {
  std::int64_t total = 0;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    JsonReader node = nodes.element(n);
    if (!node.is_object() || !node.has("gpus")) continue;
    // A node's "count" repeats it: its devices count that many times.
    const std::int64_t repeat =
        node.has("count") ? node.child("count").as_integer(1, kMaxDevices) : 1;
    JsonReader gpus = node.child("gpus");
    if (!gpus.is_array()) continue;
    for (std::size_t g = 0; g < gpus.size(); ++g) {
      JsonReader entry = gpus.element(g);
      std::int64_t count = 1;
      if (entry.is_object() && entry.has("count"))
        count = entry.child("count").as_integer(1, kMaxDevices);
      total += count * repeat;
      if (total > kMaxDevices)
        entry.fail_value(std::to_string(total) + " devices in the cluster up to this entry" +
                             (repeat > 1 ? " (the node repeated " + std::to_string(repeat) +
                                               " times by its \"count\")"
                                         : std::string()),
                         "at most " + std::to_string(kMaxDevices) +
                             " devices in a cluster (summed over all nodes)");
    }
  }
}

LinkSpec default_nic() {
  LinkSpec nic;
  nic.kind = "ethernet";
  nic.bandwidth = 25e9 / 8;
  nic.latency = 10e-6;
  return nic;
}

}  // namespace

bool Cluster::emulated() const {
  for (const auto& node : nodes)
    for (const auto& d : node.devices)
      if (d.slowdown != 1.0) return true;
  return false;
}

Cluster parse_cluster(JsonReader& reader, const SpecLookup& lookup) {
  if (!reader.is_object()) reader.fail("an object describing a cluster");
  Cluster cluster;
  cluster.name = reader.name_or("name", "cluster");
  reader.allow({"description", "source"});
  auto nodes = reader.child("nodes");
  if (!nodes.is_array() || nodes.size() == 0)
    nodes.fail("a non-empty array of nodes (a cluster needs at least one GPU)");
  check_device_total(nodes);
  std::vector<std::size_t> entry_of;  // the file's entry each node comes from
  auto entries = nodes.elements();
  for (std::size_t entry = 0; entry < entries.size(); ++entry) {
    JsonReader& node_reader = entries[entry];
    if (!node_reader.is_object()) node_reader.fail("an object describing a node");
    Node node;
    node.name = node_reader.name_or("name", "node" + std::to_string(cluster.nodes.size()));
    auto gpus = node_reader.child("gpus");
    if (!gpus.is_array() || gpus.size() == 0) gpus.fail("a non-empty array of GPUs");
    for (auto& entry : gpus.elements())
      for (auto& slot : parse_device_entry(entry, lookup)) node.devices.push_back(slot);
    if (auto link = node_reader.optional_child("intra_link")) {
      node.nvls = link->is_object() && link->boolean_or("nvls", false);
      node.intra_link = parse_link_spec(*link);
      if (node.nvls && node.intra_link.kind != "nvlink")
        link->child("nvls").fail(
            "false or absent (NVLink SHARP, NCCL's NVLS, needs an \"nvlink\" intra link "
            "through an NVSwitch; this link is \"" +
            node.intra_link.kind + "\")");
    } else {
      // Without NVLink, devices of a node talk over PCIe through the host.
      node.intra_link.kind = "pcie";
      node.intra_link.bandwidth = node.devices.front().spec.pcie_bandwidth();
      node.intra_link.latency = 5e-6;
    }
    if (auto nic = node_reader.optional_child("nic")) {
      // {"count": N, "bandwidth": B} is N NICs of B each (one per GPU on current H100 / H200
      // systems); without "count" the bandwidth is the node's total, as files before the key
      // meant it.
      if (nic->is_object() && nic->has("count"))
        node.nic_count = static_cast<int>(nic->integer("count", 1, 1024));
      node.sharp = nic->is_object() && nic->boolean_or("sharp", false);
      node.nic = parse_link_spec(*nic);
      if (node.nic_count > 0) node.nic.bandwidth *= node.nic_count;
      if (node.sharp && node.nic.kind != "infiniband")
        nic->child("sharp").fail(
            "false or absent (SHARP in-network reduction, NCCL's CollNet, needs an "
            "\"infiniband\" NIC; this NIC is \"" +
            node.nic.kind + "\")");
    } else {
      node.nic = default_nic();
    }
    // "count": N stands for N identical nodes (a 100k-GPU fleet in one entry), named
    // "<name>-0" .. "<name>-<N-1>" when the entry has a name, "node<index>" otherwise.
    const auto repeat =
        static_cast<std::size_t>(node_reader.integer_or("count", 1, 1, kMaxDevices));
    const bool named = node_reader.has("name");
    node_reader.finish();
    entry_of.resize(cluster.nodes.size() + repeat, entry);
    if (repeat == 1) {
      cluster.nodes.push_back(std::move(node));
      continue;
    }
    const std::string base = node.name;
    for (std::size_t k = 0; k < repeat; ++k) {
      Node copy = node;
      copy.name =
          named ? base + "-" + std::to_string(k) : "node" + std::to_string(cluster.nodes.size());
      cluster.nodes.push_back(std::move(copy));
    }
  }
  // A node's name labels its rows in reports, the nodes a plan leaves idle and its ranks'
  // processes in traces: two nodes of one name would make those rows ambiguous. A name made
  // from a "count" ("<name>-k", "node<i>") can meet a written one, so the made names count too.
  std::unordered_map<std::string, std::size_t> first_of;
  for (std::size_t n = 0; n < cluster.nodes.size(); ++n) {
    const auto [it, fresh] = first_of.emplace(cluster.nodes[n].name, n);
    if (fresh) continue;
    const std::size_t e = entry_of[n], first = it->second;
    const bool written = entries[e].has("name");
    throw ValidationError(reader.file(), entries[e].where() + (written ? ".name" : ""),
                          "\"" + cluster.nodes[n].name + "\" for node " + std::to_string(n),
                          "a node name no other node has: node " + std::to_string(first) +
                              " (from nodes[" + std::to_string(entry_of[first]) +
                              "]) is already named so (names label report rows and trace "
                              "processes; a \"count\" names its copies \"<name>-0\", ...)");
  }
  if (cluster.nodes.size() > 1) {
    // Multi-node clusters must say how nodes connect: a default would silently decide results.
    for (std::size_t n = 0; n < nodes.size(); ++n)  // the file's entries (a count repeats one)
      if (!nodes.element(n).has("nic"))
        throw ValidationError(reader.file(), nodes.element(n).where() + ".nic", "nothing (missing)",
                              "a NIC {\"kind\", \"bandwidth\", \"latency\"} for every node of a "
                              "multi-node cluster");
  }
  reader.finish();
  return cluster;
}

namespace {

// `{"hf_config": "config.json"}`, the path relative to the file the job was read from.
ModelSpec read_hf_model(JsonReader& model, const std::string& job_file) {
  auto path_reader = model.child("hf_config");
  model.finish();
  return load_hf_config_named_by(path_reader, std::filesystem::path(job_file).parent_path(),
                                 "the job file");
}

}  // namespace

Job parse_job(JsonReader& reader, const SpecLookup& lookup) {
  if (!reader.is_object()) reader.fail("an object describing a training job");
  Job job;
  reader.allow({"description", "name"});
  auto model = reader.child("model");
  if (auto spec = reader.optional_child("model_spec")) {
    // The resolved architecture a self-contained record carries (to_self_contained_json): it is
    // the model, and "model" only its name as first written, so a job read from a config file
    // or an inline architecture reads back without the catalog or the file.
    if (!model.is_string())
      model.fail("the model's name (a string) beside \"model_spec\", the architecture");
    job.model = parse_model_spec(*spec);
    job.model_name = model.as_string();
  } else if (model.is_string()) {
    job.model_name = model.as_string();
    auto spec = lookup.find_model(job.model_name);
    if (!spec) {
      auto close = closest_names(job.model_name, lookup.model_names());
      std::string expected = "a model from the catalog (`cephalo describe models`)";
      if (!close.empty()) {
        expected += "; closest: ";
        for (std::size_t i = 0; i < close.size(); ++i) expected += (i ? ", " : "") + close[i];
      }
      model.fail_value("unknown model \"" + job.model_name + "\"", expected);
    }
    job.model = *spec;
  } else if (model.is_object() && model.has("hf_config")) {
    job.model = read_hf_model(model, reader.file());
    job.model_name = job.model.name;
  } else if (model.is_object()) {
    job.model = parse_model_spec(model);
    job.model_name = job.model.name;
  } else {
    model.fail("a model name, {\"hf_config\": \"config.json\"} or an inline architecture object");
  }
  job.sequence_length = static_cast<int>(reader.integer("sequence_length", 1, kMaxSequenceLength));
  if (const std::string why = sequence_refusal(job.model, job.sequence_length); !why.empty())
    reader.child("sequence_length").fail(why);
  job.global_batch = static_cast<int>(reader.integer("global_batch", 1, kMaxGlobalBatch));
  // A job naming a Hugging Face config computes in the checkpoint's torch_dtype unless its
  // precision names a compute dtype (catalog names describe architectures only).
  const bool from_config = model.is_object() && model.has("hf_config");
  if (from_config && job.model.checkpoint_dtype)
    job.precision.compute = *job.model.checkpoint_dtype;
  if (auto p = reader.optional_child("precision")) {
    auto dtype_of = [&](const char* key, Dtype fallback) {
      auto c = p->optional_child(key);
      if (!c) return fallback;
      auto d = parse_dtype(c->as_string());
      if (!d) c->fail("one of " + dtype_spellings());
      return *d;
    };
    job.precision.params = dtype_of("params", Dtype::FP32);
    job.precision.compute = dtype_of("compute", job.precision.compute);
    job.precision.reduce = dtype_of("reduce", Dtype::FP32);
    p->finish();
  }
  if (auto o = reader.optional_child("optimizer")) {
    job.optimizer.kind = o->has("kind") ? o->child("kind").as_enum({"adamw"}) : "adamw";
    auto positive = [&](const char* key, double fallback, double lo, double hi) {
      auto c = o->optional_child(key);
      if (!c) return fallback;
      double v = c->as_number();
      if (!(v >= lo && v <= hi))
        c->fail("a number from " + format_quantity(lo, Quantity::Dimensionless) + " to " +
                format_quantity(hi, Quantity::Dimensionless));
      return v;
    };
    job.optimizer.learning_rate = positive("learning_rate", 1e-4, 0, 10);
    job.optimizer.beta1 = positive("beta1", 0.9, 0, 0.999999);
    job.optimizer.beta2 = positive("beta2", 0.999, 0, 0.999999);
    job.optimizer.epsilon = positive("epsilon", 1e-8, 1e-30, 1);
    job.optimizer.weight_decay = positive("weight_decay", 0.01, 0, 10);
    o->finish();
  }
  if (auto impl = reader.optional_child("implementation"))
    job.implementation = parse_implementation(*impl);
  reader.finish();
  return job;
}

std::string to_string(AttentionKernel a) { return a == AttentionKernel::Flash ? "flash" : "eager"; }

std::string to_string(FlashKernel k) { return k == FlashKernel::Cudnn ? "cudnn" : "flash-attn"; }

const std::vector<std::string>& flash_kernel_names() {
  static const std::vector<std::string> names = {"flash-attn", "cudnn"};
  return names;
}

std::optional<FlashKernel> parse_flash_kernel(const std::string& name) {
  if (name == "flash-attn") return FlashKernel::FlashAttn;
  if (name == "cudnn") return FlashKernel::Cudnn;
  return std::nullopt;
}

bool flash_kernel_applies(AttentionKernel attention) { return attention == AttentionKernel::Flash; }

std::string to_string(LossKernel l) { return l == LossKernel::Fused ? "fused" : "eager"; }

std::string to_string(Framework f) {
  switch (f) {
    case Framework::FSDP2:
      return "fsdp2";
    case Framework::FSDP1:
      return "fsdp1";
    case Framework::DeepSpeedZero3:
      return "deepspeed_zero3";
    case Framework::DDP:
      return "ddp";
  }
  return "?";
}

std::string to_string(WeightGradients w) {
  return weight_gradient_names().at(static_cast<std::size_t>(w));
}

const std::vector<std::string>& weight_gradient_names() {
  static const std::vector<std::string> names = {"autocast", "main_grad", "main_grad_compute_dtype",
                                                 "fused_main_grad"};
  return names;
}

const std::vector<std::string>& framework_names() {
  static const std::vector<std::string> names = {"fsdp2", "fsdp1", "deepspeed_zero3", "ddp"};
  return names;
}

std::optional<Framework> parse_framework(const std::string& name) {
  for (Framework f :
       {Framework::FSDP2, Framework::FSDP1, Framework::DeepSpeedZero3, Framework::DDP})
    if (to_string(f) == name) return f;
  return std::nullopt;
}

std::string to_string(const Implementation& impl) {
  std::string out = to_string(impl.attention) + (impl.fused() ? ", fused" : ", unfused");
  if (impl.flash_kernel != FlashKernel::FlashAttn) out += ", " + to_string(impl.flash_kernel);
  if (impl.compiled) out += ", compiled";
  if (impl.cross_entropy == LossKernel::Fused) out += ", fused cross-entropy";
  if (impl.framework != Framework::FSDP2) out += ", " + to_string(impl.framework);
  if (impl.tp_comm_overlap) out += ", TP comm overlap";
  if (impl.defer_embedding_wgrad_compute) {
    out += ", deferred output wgrad";
    if (impl.wgrad_deferral_limit > 0)
      out += " (limit " + std::to_string(impl.wgrad_deferral_limit) + ")";
  }
  if (impl.weight_gradients != WeightGradients::Autocast)
    out += ", " + to_string(impl.weight_gradients);
  return out;
}

std::string stack_label(const Implementation& impl) {
  if (!impl.stack) return "";
  auto factor = [](const char* name, const StackFactor& f) {
    char text[48];
    std::snprintf(text, sizeof text, "%s x%.4g%s", name, f.value,
                  f.identified ? "" : " (not fitted)");
    return std::string(text);
  };
  return "; stack " + (impl.stack_file.empty() ? std::string("(inline)") : impl.stack_file) + ": " +
         factor("compute", impl.stack->compute) + ", " + factor("comm", impl.stack->comm) + ", " +
         factor("optimizer", impl.stack->optimizer);
}

Implementation parse_implementation(JsonReader& reader) {
  if (!reader.is_object())
    reader.fail(
        "an object {\"attention\": \"flash\" | \"eager\", \"flash_kernel\": \"flash-attn\" | "
        "\"cudnn\", \"fused_elementwise\": bool, "
        "\"compiled\": bool, \"cross_entropy\": \"eager\" | \"fused\", \"framework\": \"fsdp2\" | "
        "\"fsdp1\" | \"deepspeed_zero3\" | "
        "\"ddp\", \"tp_comm_overlap\": bool, \"defer_embedding_wgrad_compute\": bool, "
        "\"wgrad_deferral_limit\": integer >= 0, \"weight_gradients\": \"autocast\" | "
        "\"main_grad\" | \"main_grad_compute_dtype\" | \"fused_main_grad\"}");
  Implementation impl;
  if (auto a = reader.optional_child("attention"))
    impl.attention =
        a->as_enum({"flash", "eager"}) == "flash" ? AttentionKernel::Flash : AttentionKernel::Eager;
  if (auto k = reader.optional_child("flash_kernel")) {
    // The kernel of flash attention: with eager attention it would silently price nothing.
    if (!flash_kernel_applies(impl.attention))
      k->fail("no \"flash_kernel\" unless \"attention\" is \"flash\"");
    impl.flash_kernel = *parse_flash_kernel(k->as_enum(flash_kernel_names()));
  }
  impl.compiled = reader.boolean_or("compiled", false);
  if (auto l = reader.optional_child("cross_entropy"))
    impl.cross_entropy =
        l->as_enum({"eager", "fused"}) == "fused" ? LossKernel::Fused : LossKernel::Eager;
  if (auto f = reader.optional_child("fused_elementwise")) {
    impl.fused_elementwise = f->as_bool();
    // Inductor fuses the pointwise chains itself: an unfused compiled stack does not exist.
    if (impl.compiled && !impl.fused_elementwise)
      f->fail_value("false",
                    "true or absent when \"compiled\" is true (torch.compile fuses the "
                    "elementwise ops itself)");
  }
  if (auto f = reader.optional_child("framework")) {
    impl.framework = *parse_framework(f->as_enum(framework_names()));
    impl.framework_declared = true;
  }
  impl.tp_comm_overlap = reader.boolean_or("tp_comm_overlap", false);
  impl.defer_embedding_wgrad_compute = reader.boolean_or("defer_embedding_wgrad_compute", false);
  if (auto l = reader.optional_child("wgrad_deferral_limit")) {
    // Megatron-Core reads the limit only with the deferral on; a limit without it would
    // silently price nothing.
    if (!impl.defer_embedding_wgrad_compute)
      l->fail("no \"wgrad_deferral_limit\" unless \"defer_embedding_wgrad_compute\" is true");
    impl.wgrad_deferral_limit = static_cast<int>(l->as_integer(0, 1 << 30));
  }
  if (auto w = reader.optional_child("weight_gradients")) {
    const auto& names = weight_gradient_names();
    const std::string name = w->as_enum(names);
    impl.weight_gradients =
        static_cast<WeightGradients>(std::find(names.begin(), names.end(), name) - names.begin());
  }
  if (auto st = reader.optional_child("stack")) {
    if (st->is_string()) {
      std::filesystem::path file = st->as_string();
      if (file.is_relative()) file = std::filesystem::path(reader.file()).parent_path() / file;
      impl.stack = load_stack_calibration(file);
      impl.stack_file = file.string();  // set_stack's two fields, read where the job's file is
    } else if (st->is_object()) {
      impl.stack = parse_stack_calibration(*st);
    } else {
      st->fail("a stack file's path (cephalo calibrate stack -o FILE) or its object");
    }
  }
  reader.finish();
  return impl;
}

Json to_json(const Implementation& impl) {
  Json j = {{"attention", to_string(impl.attention)},
            {"fused_elementwise", impl.fused()},
            {"compiled", impl.compiled}};
  // Written only when not the default, so records of jobs without it read as they always did.
  if (impl.flash_kernel != FlashKernel::FlashAttn) j["flash_kernel"] = to_string(impl.flash_kernel);
  // Only a named framework is written, so that a record read back as a job prices what the
  // job it came from priced (framework_declared).
  if (impl.framework_declared) j["framework"] = to_string(impl.framework);
  // Written only when on, so records of jobs without it read as they always did.
  if (impl.tp_comm_overlap) j["tp_comm_overlap"] = true;
  if (impl.defer_embedding_wgrad_compute) {
    j["defer_embedding_wgrad_compute"] = true;
    j["wgrad_deferral_limit"] = impl.wgrad_deferral_limit;
  }
  if (impl.weight_gradients != WeightGradients::Autocast)
    j["weight_gradients"] = to_string(impl.weight_gradients);
  if (impl.cross_entropy == LossKernel::Fused) j["cross_entropy"] = "fused";
  if (impl.stack) j["stack"] = to_json(*impl.stack);
  return j;
}

Scenario parse_scenario(JsonReader& reader, const SpecLookup& lookup,
                        const std::filesystem::path& base_dir) {
  if (!reader.is_object()) reader.fail("an object with \"cluster\" and \"job\"");
  Scenario scenario;
  scenario.name = reader.name_or("name", "scenario");
  reader.allow({"description"});
  auto part = [&](const char* key, auto parse_inline, auto load_file) {
    auto c = reader.child(key);
    if (c.is_string()) {
      std::filesystem::path p = c.as_string();
      if (p.is_relative()) p = base_dir / p;
      try {
        return load_file(p);
      } catch (const IoError& e) {
        // The part's own file is this key's fault; a file it names in turn (a job's stack
        // file, a cluster's catalog) stays a file error naming that file (exit 5).
        if (std::string_view(e.what()).rfind(p.string() + ":", 0) != 0) throw;
        c.fail_value("\"" + c.as_string() + "\" (" + e.what() + ")",
                     std::string("a readable ") + key + " file");
      }
    }
    return parse_inline(c);
  };
  scenario.cluster = part(
      "cluster", [&](JsonReader& r) { return parse_cluster(r, lookup); },
      [&](const std::filesystem::path& p) { return load_cluster(p, lookup); });
  scenario.job = part(
      "job", [&](JsonReader& r) { return parse_job(r, lookup); },
      [&](const std::filesystem::path& p) { return load_job(p, lookup); });
  if (auto cal = reader.optional_child("calibration")) {
    for (auto& item : cal->elements()) {
      std::filesystem::path p = item.as_string();
      if (p.is_relative()) p = base_dir / p;
      std::error_code ec;
      if (!std::filesystem::is_regular_file(p, ec))
        item.fail("a path to an existing calibration file (relative to the scenario)");
      scenario.calibration.push_back(p);
    }
  }
  reader.finish();
  return scenario;
}

Cluster load_cluster(const std::filesystem::path& file, const SpecLookup& lookup) {
  Json j = read_json_file(file);
  JsonReader r(j, file.string());
  return parse_cluster(r, lookup);
}

Job load_job(const std::filesystem::path& file, const SpecLookup& lookup) {
  Json j = read_json_file(file);
  JsonReader r(j, file.string());
  return parse_job(r, lookup);
}

Scenario load_scenario(const std::filesystem::path& file, const SpecLookup& lookup) {
  Json j = read_json_file(file);
  JsonReader r(j, file.string());
  Scenario s = parse_scenario(r, lookup, file.parent_path());
  s.file = file;
  return s;
}

namespace {
// The NIC as the file form says it: per NIC with its count, or the node's total.
Json nic_json(const Node& node) {
  Json j = to_json(node.nic);
  if (node.nic_count > 0) {
    j["count"] = node.nic_count;
    j["bandwidth"] = node.nic.bandwidth / node.nic_count;
  }
  if (node.sharp) j["sharp"] = true;
  return j;
}
}  // namespace

Json to_json(const Cluster& cluster) {
  Json nodes = Json::array();
  for (const auto& node : cluster.nodes) {
    Json gpus = Json::array();
    for (const auto& d : node.devices) {
      Json g = {{"type", d.type}};
      if (d.slowdown != 1.0) g["slowdown"] = d.slowdown;
      if (d.threads) g["threads"] = d.threads;
      gpus.push_back(g);
    }
    Json intra = to_json(node.intra_link);
    if (node.nvls) intra["nvls"] = true;
    nodes.push_back(
        {{"name", node.name}, {"gpus", gpus}, {"intra_link", intra}, {"nic", nic_json(node)}});
  }
  return {{"name", cluster.name}, {"nodes", nodes}};
}

std::vector<std::string> cluster_notes(const Cluster& cluster) {
  std::vector<std::string> out;
  if (cluster.nodes.size() < 2) return out;  // a single node's NIC carries nothing
  int implicit = 0;
  std::string first;
  for (const auto& n : cluster.nodes)
    if (n.nic_count == 0 && implicit++ == 0) first = n.name;
  if (implicit > 0)
    out.push_back(std::to_string(implicit) + " node(s) (first: " + first +
                  ") give \"nic\" without \"count\": its bandwidth is read as the node's total; "
                  "say {\"count\": N, \"bandwidth\": per NIC} (current H100 / H200 systems have "
                  "one 400 Gbit/s NIC per GPU)");
  return out;
}

std::vector<std::string> gpu_types(const Cluster& cluster) {
  std::vector<std::string> out;
  for (const auto& n : cluster.nodes)
    for (const auto& d : n.devices) out.push_back(d.spec.name);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> stack_notes(const Scenario& scenario) {
  std::vector<std::string> out;
  const Job& job = scenario.job;
  if (!job.implementation.stack) return out;
  const auto& on = job.implementation.stack->fitted_on;
  const std::string from = "the stack calibration was fitted on ";
  auto differs = [&](const std::string& what, const std::string& fitted, const std::string& now,
                     const char* consequence) {
    if (fitted != now)
      out.push_back(from + what + " " + fitted + ", this job's is " + now + consequence);
  };
  const char* may_not = ": its factors may not carry over";
  differs("model family", on.family, job.model.family, may_not);
  differs("compute precision", on.dtype, to_string(job.precision.compute), may_not);
  differs("implementation", on.implementation, to_string(job.implementation), may_not);
  differs("model", on.model, job.model_name, "");
  const std::vector<std::string> gpus = gpu_types(scenario.cluster);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : " + ") + x;
    return s;
  };
  differs("GPUs", join(on.gpus), join(gpus), "");
  differs("cluster size", std::to_string(on.ranks) + " ranks",
          std::to_string(scenario.cluster.num_ranks()) + " ranks", "");
  differs("sequence length", std::to_string(on.sequence_length),
          std::to_string(job.sequence_length), "");
  differs("global batch", std::to_string(on.global_batch), std::to_string(job.global_batch), "");
  return out;
}

void set_stack(Job& job, const std::filesystem::path& file) {
  job.implementation.stack = load_stack_calibration(file);
  job.implementation.stack_file = file.string();
}

Json to_json(const Job& job) {
  return {{"model", job.model_name},
          {"sequence_length", job.sequence_length},
          {"global_batch", job.global_batch},
          {"precision",
           {{"params", to_string(job.precision.params)},
            {"compute", to_string(job.precision.compute)},
            {"reduce", to_string(job.precision.reduce)}}},
          {"optimizer",
           {{"kind", job.optimizer.kind},
            {"learning_rate", job.optimizer.learning_rate},
            {"beta1", job.optimizer.beta1},
            {"beta2", job.optimizer.beta2},
            {"epsilon", job.optimizer.epsilon},
            {"weight_decay", job.optimizer.weight_decay}}},
          {"implementation", to_json(job.implementation)}};
}

Json to_self_contained_json(const Job& job) {
  Json j = to_json(job);
  j["model_spec"] = to_json(job.model);
  return j;
}

Json to_self_contained_json(const Scenario& scenario) {
  Json j = to_json(scenario);
  j["job"] = to_self_contained_json(scenario.job);
  // Absolute, so that the record reads back from any working directory (a relative path was
  // resolved against the working directory of the process that read the scenario).
  if (j.contains("calibration"))
    for (auto& c : j["calibration"]) c = std::filesystem::absolute(c.get<std::string>()).string();
  return j;
}

Json to_json(const Scenario& scenario) {
  Json cal = Json::array();
  for (const auto& c : scenario.calibration) cal.push_back(c.string());
  Json j = {{"name", scenario.name},
            {"cluster", to_json(scenario.cluster)},
            {"job", to_json(scenario.job)}};
  if (!cal.empty()) j["calibration"] = cal;
  return j;
}

}  // namespace cephalo
