#pragma once
// Cluster, Job and Scenario (DESIGN §4). Loading resolves catalog names through a SpecLookup so
// that an unknown GPU or model is reported at the exact JSON path where it was written.
#include <atomic>
#include <filesystem>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cephalo/core/specs.hpp"
#include "cephalo/core/stack_calibration.hpp"

namespace cephalo {

// Most devices a cluster may have, summed over every node's "count"s before any device is
// created (a small file must not be able to ask for gigabytes). 2^20 leaves ten times the
// 100k-GPU clusters the planner is built for; each device slot costs a few hundred bytes.
constexpr int kMaxDevices = 1 << 20;

// Name resolution for GPUs and models; costmodels/ implements it with its catalogs.
class SpecLookup {
 public:
  virtual ~SpecLookup() = default;
  virtual std::optional<DeviceSpec> find_device(const std::string& name) const = 0;
  virtual std::vector<std::string> device_names() const = 0;
  virtual std::optional<ModelSpec> find_model(const std::string& name) const = 0;
  virtual std::vector<std::string> model_names() const = 0;
};

// One device slot in a node.
struct DeviceSlot {
  std::string type;       // name as written (catalog name or alias, or the inline spec's name)
  DeviceSpec spec;        // resolved
  double slowdown = 1.0;  // emulation: repeat compute this many times (1 = real hardware)
  int threads = 0;        // CPU devices: worker threads (0 = default)

  bool operator==(const DeviceSlot&) const = default;
};

struct Node {
  std::string name;
  std::vector<DeviceSlot> devices;
  LinkSpec intra_link;  // between devices of this node (PCIe through the host, or NVLink)
  // Node to switch: `nic.bandwidth` is the node's total over all its NICs. `nic_count` is how
  // many NICs the file gave ({"count": 8, "bandwidth": "400Gbit/s"}: 8 NICs of 400 Gbit/s,
  // 3.2 Tbit/s in all); 0 for the old form without "count", whose bandwidth is read as the
  // node's total (cluster_notes says so).
  LinkSpec nic;
  int nic_count = 0;
  // In-network reduction the node's switches offer (cluster key `intra_link.nvls`, `nic.sharp`):
  // NVLink SHARP on the NVSwitch (NCCL's NVLS algorithms, Hopper and newer) and SHARP in the
  // InfiniBand fabric (NCCL's CollNet). Without them NCCL runs rings and trees only.
  bool nvls = false;
  bool sharp = false;
};

// A device with its global rank, as the plan and the backend number them (node-major order).
struct RankDevice {
  int rank = 0;
  int node = 0;
  int local_index = 0;
  const DeviceSlot* slot = nullptr;
  // Numbers shared by alike ranks, 0, 1, ... in order of first rank. Every node of a fleet holds
  // its own copy of its slots, so a walk over 100k ranks that reads their slots reads 100k
  // places; these let it compare two integers per rank from the table instead, and compute what
  // depends on a slot once per number.
  // `slot_kind`: ranks whose slots are equal in every field (type, spec, slowdown, threads).
  int slot_kind = 0;
  // `device_kind`: ranks of one spec name and emulation slowdown on nodes of one intra-node link
  // kind: what the class replay and the plan's unit-pass bound tell devices apart by.
  int device_kind = 0;
};

namespace detail {
// The rank table of a NodeList, built on its first query and dropped by every change of the
// list (NodeList's mutators), so a query is one atomic load: it never walks the nodes and can
// never describe nodes that changed since. A copy starts without a table (its slots are the
// copy's). Queries from several threads are safe; changing the list while another thread reads
// is not.
class RankTable {
 public:
  RankTable() = default;
  RankTable(const RankTable&) noexcept {}
  RankTable& operator=(const RankTable&) noexcept {
    reset();
    return *this;
  }
  ~RankTable() { reset(); }
  const std::vector<RankDevice>& of(const std::vector<Node>& nodes) const {
    if (const auto* built = current_.load(std::memory_order_acquire)) return *built;
    return build(nodes);
  }
  void reset() noexcept;

 private:
  const std::vector<RankDevice>& build(const std::vector<Node>& nodes) const;
  mutable std::mutex mutex_;
  mutable std::atomic<const std::vector<RankDevice>*> current_{nullptr};
};
}  // namespace detail

// A cluster's nodes: read as a const std::vector<Node> (indexing, iteration, size, a const
// reference by conversion), changed only through the functions below, each of which drops the
// rank table (Cluster::ranks()), so the table is built once per shape of the cluster and cannot
// go stale. Like an iterator, a reference from ranks() is invalidated by any change.
class NodeList {
 public:
  using value_type = Node;
  using const_iterator = std::vector<Node>::const_iterator;
  using iterator = const_iterator;
  using size_type = std::size_t;

  NodeList() = default;
  NodeList(std::vector<Node> nodes) : nodes_(std::move(nodes)) {}  // NOLINT: implicit by design
  NodeList(std::initializer_list<Node> nodes) : nodes_(nodes) {}
  NodeList& operator=(std::vector<Node> nodes) {
    nodes_ = std::move(nodes);
    table_.reset();
    return *this;
  }
  NodeList& operator=(std::initializer_list<Node> nodes) {
    return *this = std::vector<Node>(nodes);
  }

  const std::vector<Node>& vector() const { return nodes_; }
  operator const std::vector<Node>&() const { return nodes_; }  // NOLINT: implicit by design
  std::size_t size() const { return nodes_.size(); }
  bool empty() const { return nodes_.empty(); }
  const Node& operator[](std::size_t i) const { return nodes_[i]; }
  const Node& at(std::size_t i) const { return nodes_.at(i); }
  const Node& front() const { return nodes_.front(); }
  const Node& back() const { return nodes_.back(); }
  const_iterator begin() const { return nodes_.begin(); }
  const_iterator end() const { return nodes_.end(); }
  const_iterator cbegin() const { return nodes_.cbegin(); }
  const_iterator cend() const { return nodes_.cend(); }

  void push_back(Node node) {
    nodes_.push_back(std::move(node));
    table_.reset();
  }
  void reserve(std::size_t n) { nodes_.reserve(n); }  // moves nodes, never their device slots
  void clear() {
    nodes_.clear();
    table_.reset();
  }
  // Any other change: `change(nodes)` on the vector itself. The table is dropped before it runs
  // (also when it throws); keep no reference into the vector past the call.
  template <class Change>
  decltype(auto) edit(Change&& change) {
    table_.reset();
    return std::forward<Change>(change)(nodes_);
  }

  // Every device with its rank (node-major), built on the first query after a change.
  const std::vector<RankDevice>& ranks() const { return table_.of(nodes_); }

  // A cluster cut to the nodes a plan uses (core/plan_nodes.hpp, with_nodes): which nodes of
  // the scenario's cluster these are, by index, and the nodes left idle. Both empty for a
  // cluster as its file gave it.
  std::vector<int> used_nodes;
  std::vector<Node> idle;

 private:
  std::vector<Node> nodes_;
  detail::RankTable table_;
};

struct Cluster {
  std::string name;
  NodeList nodes;

  // Every device with its rank (node-major): built once per shape of `nodes` (NodeList), one
  // atomic load per call after that. Like an iterator, the reference is invalidated by changing
  // `nodes`.
  const std::vector<RankDevice>& ranks() const { return nodes.ranks(); }
  int num_ranks() const { return static_cast<int>(ranks().size()); }
  bool emulated() const;  // any slot with slowdown != 1

  // A cluster cut to the nodes a plan uses (core/plan_nodes.hpp, with_nodes): which nodes of
  // the scenario's cluster these are, by index, and the nodes left idle. Both empty for a
  // cluster as its file gave it.
  std::vector<int> used_nodes;
  std::vector<Node> idle;
};

struct Precision {
  Dtype params = Dtype::FP32;   // master weights and optimizer state
  Dtype compute = Dtype::FP16;  // gathered parameters and activations
  Dtype reduce = Dtype::FP32;   // gradient reduction
};

struct OptimizerSpec {
  std::string kind = "adamw";
  double learning_rate = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.01;
};

// How the model's layers are implemented: the same architecture costs different time and
// memory depending on the kernels the software stack runs (DESIGN §4, costmodels/README.md).
enum class AttentionKernel {
  Flash,  // fused attention (FlashAttention / PyTorch SDPA): no s×s scores in memory
  Eager,  // scores materialised, softmax as its own kernel (what the backend's devices run)
};
std::string to_string(AttentionKernel a);

// Which kernel runs flash attention (AttentionKernel::Flash); both run the FlashAttention-2
// algorithm, with the same memory, and differ in the tensor-core instructions they issue.
enum class FlashKernel {
  // FlashAttention-2 (the flash-attn package, PyTorch SDPA's flash backend): the warp-level
  // mma.sync of Ampere, which on Hopper reaches only part of the datasheet peak
  // (costmodels' legacy_mma_fraction).
  FlashAttn,
  // cuDNN's fused attention (Transformer Engine's FusedAttention, which Transformer Engine
  // prefers over flash-attn on Hopper and newer): kernels built for each architecture's own
  // tensor-core instructions.
  Cudnn,
};
std::string to_string(FlashKernel k);
// The accepted names ("flash-attn" first, the default), and the kernel a name selects
// (nullopt for any other name).
const std::vector<std::string>& flash_kernel_names();
std::optional<FlashKernel> parse_flash_kernel(const std::string& name);
// Whether a flash kernel may be named with this attention: only with flash attention (with
// eager attention the kernel would price nothing). The one rule the job key and `predict
// layer --flash-kernel` refuse by.
bool flash_kernel_applies(AttentionKernel attention);

// How the language-model loss is computed over the logits (what the head's backward holds).
enum class LossKernel {
  // The framework's cross-entropy under autocast (torch.nn.CrossEntropyLoss): the logits in
  // the compute dtype and an fp32 log-softmax the size of the logits, which becomes their
  // gradient (what the backend runs).
  Eager,
  // A fused cross-entropy kernel (flash-attn's xentropy CrossEntropyLoss, llm-foundry's
  // default `loss_fn: fused_crossentropy`): it keeps the logits and one fp32 log-sum-exp per
  // token, and writes the logits' gradient in their own dtype; no fp32 copy of the logits.
  Fused,
};
std::string to_string(LossKernel l);

// The sharding runtime that runs the layers (costmodels/README.md, "Frameworks"). FSDP2
// (PyTorch's fully_shard) is what the simulator's schedule describes.
enum class Framework { FSDP2, FSDP1, DeepSpeedZero3, DDP };
std::string to_string(Framework f);
// "fsdp2", "fsdp1", "deepspeed_zero3", "ddp"; nullopt for anything else.
std::optional<Framework> parse_framework(const std::string& name);
const std::vector<std::string>& framework_names();

// Where a linear layer's weight gradient goes in each backward call: the per-weight kernels a
// stack launches outside the GEMMs (costmodels/weight_gradients.hpp prices them, and the
// difference to what the profiles ran).
enum class WeightGradients {
  // fp32 module weights under torch.autocast (what the published profiles ran; PyTorch FSDP,
  // DDP): the backward casts each weight gradient back to fp32 and adds it into the fp32
  // .grad (AccumulateGrad).
  Autocast,
  // Megatron's mixed precision with an fp32 main_grad (bf16, or fp16 with
  // --accumulate-allreduce-grads-in-fp32): the weights are held in the compute dtype and a
  // hook adds each weight gradient into its fp32 main_grad (main_grad.add_(grad)).
  MainGrad,
  // The same hook into a main_grad held in the compute dtype: Megatron-LM fp16 without
  // --accumulate-allreduce-grads-in-fp32 (its default), whose local DDP buffer has the
  // parameters' dtype.
  MainGradComputeDtype,
  // gradient_accumulation_fusion (Megatron-LM, NeMo; Transformer Engine's
  // fuse_wgrad_accumulation): the weight-gradient GEMM accumulates into the fp32 main_grad
  // itself, no kernel of its own.
  FusedMainGrad,
};
std::string to_string(WeightGradients w);
// The accepted names, in the order of the enum ("autocast" first, the default).
const std::vector<std::string>& weight_gradient_names();

struct Implementation {
  AttentionKernel attention = AttentionKernel::Flash;
  bool fused_elementwise = true;  // bias+activation, residual+norm fused (torch.compile, Triton)
  LossKernel cross_entropy = LossKernel::Eager;
  // The flash-attention kernel (only with attention Flash; parse_implementation refuses it
  // with eager attention).
  FlashKernel flash_kernel = FlashKernel::FlashAttn;
  // torch.compile (Inductor): every chain of pointwise and normalisation ops between two
  // GEMMs runs as one generated kernel, so a compiled stack's layers are fused whatever
  // fused_elementwise says (parse_implementation refuses compiled with fused_elementwise false).
  bool compiled = false;
  Framework framework = Framework::FSDP2;
  // Whether the job names its framework ("framework" in the file, --framework): only then are
  // the runtime's own buffer copies priced (costmodels/framework_buffers.hpp), so a job that
  // names none prices as before they were modelled.
  bool framework_declared = false;
  // Transformer Engine's userbuffers TP communication overlap (Megatron-Core / NeMo
  // `tp_comm_overlap`, `ub_tp_comm_overlap`): a layer's sequence-parallel all-gathers and
  // reduce-scatters run in chunks under its linear GEMMs instead of between them
  // (costmodels/tensor_parallel.hpp, tp_overlap_exposed_seconds). Like NeMo, which turns it
  // off without sequence parallelism, it changes nothing for a split whose layers all-reduce.
  bool tp_comm_overlap = false;
  // Megatron-Core's deferred output-layer weight gradient (`defer_embedding_wgrad_compute`,
  // `wgrad_deferral_limit`): on a pipeline's last stage the output layer's weight-gradient GEMM
  // of the first `wgrad_deferral_limit` micro-batches (0: all of them) leaves their backward
  // and runs after the stage's last backward, in the pipeline flush
  // (pipeline::deferred_wgrad_micro_batches, the one rule). Nothing changes without a pipeline.
  bool defer_embedding_wgrad_compute = false;
  int wgrad_deferral_limit = 0;
  WeightGradients weight_gradients = WeightGradients::Autocast;
  // A measured stack's factors on the modelled times (`"stack": "file.json"`, or `--stack` on
  // plan / simulate / sweep); make_cost_models applies them. `stack_file` is where they were
  // read from ("" when given inline).
  std::optional<StackCalibration> stack = std::nullopt;
  std::string stack_file = "";
  // The op list the stack launches is fused (fused_elementwise, or compiled).
  bool fused() const { return fused_elementwise || compiled; }
  // The same stack whether or not its framework was named (that only decides whether its
  // copies are priced): a profile row or the backend's stack matches a job that names fsdp2.
  bool operator==(const Implementation& o) const {
    return attention == o.attention && flash_kernel == o.flash_kernel &&
           fused_elementwise == o.fused_elementwise && cross_entropy == o.cross_entropy &&
           compiled == o.compiled && framework == o.framework &&
           tp_comm_overlap == o.tp_comm_overlap &&
           defer_embedding_wgrad_compute == o.defer_embedding_wgrad_compute &&
           wgrad_deferral_limit == o.wgrad_deferral_limit &&
           weight_gradients == o.weight_gradients && stack == o.stack && stack_file == o.stack_file;
  }
};
// "flash, fused" style label, as calibration sources and reports print it; ", compiled" and
// the framework are appended only when they differ from the defaults (so labels recorded
// before they existed still compare equal).
std::string to_string(const Implementation& impl);

// "; stack s.json: compute x1.123, comm x1, optimizer x1" for a job with a stack calibration,
// "" without: printed after to_string(Implementation) wherever a prediction says what it priced.
std::string stack_label(const Implementation& impl);

struct Job {
  std::string model_name;  // as written
  ModelSpec model;         // resolved
  int sequence_length = 0;
  int global_batch = 0;
  Precision precision;
  OptimizerSpec optimizer;
  Implementation implementation;  // defaults: what current PyTorch FSDP stacks run
};

struct Scenario {
  std::string name;
  std::filesystem::path file;  // where it was loaded from (empty if built in code)
  Cluster cluster;
  Job job;
  std::vector<std::filesystem::path> calibration;  // resolved relative to the scenario file
};

// Parsers of the parts; `file` is used only in error messages. `base_dir` resolves relative
// references (a scenario's "cluster": "clusters/x.json").
Cluster parse_cluster(JsonReader& reader, const SpecLookup& lookup);
Job parse_job(JsonReader& reader, const SpecLookup& lookup);
Scenario parse_scenario(JsonReader& reader, const SpecLookup& lookup,
                        const std::filesystem::path& base_dir);

Cluster load_cluster(const std::filesystem::path& file, const SpecLookup& lookup);
Job load_job(const std::filesystem::path& file, const SpecLookup& lookup);
Scenario load_scenario(const std::filesystem::path& file, const SpecLookup& lookup);

// Reads {"attention": "flash"|"eager", "fused_elementwise": bool, "compiled": bool,
// "flash_kernel": "flash-attn"|"cudnn" (only with attention flash), "cross_entropy":
// "eager"|"fused", "framework": "fsdp2"|"fsdp1"|"deepspeed_zero3"|"ddp", "tp_comm_overlap": bool,
// "defer_embedding_wgrad_compute": bool, "wgrad_deferral_limit": integer >= 0 (only with the
// former true), "weight_gradients": "autocast"|"main_grad"|"main_grad_compute_dtype"|
// "fused_main_grad",
// "stack": "file.json" | {cephalo-stack}}
// (all optional; a stack file's path is relative to the file the reader reads).
Implementation parse_implementation(JsonReader& reader);
Json to_json(const Implementation& impl);

Json to_json(const Cluster& cluster);
// What a reader should know about how a cluster file was read (a node's NIC given without
// "count", read as the node's total bandwidth); one line per kind of note, empty when none.
std::vector<std::string> cluster_notes(const Cluster& cluster);
// The GPU types of a cluster (resolved names), sorted, each once.
std::vector<std::string> gpu_types(const Cluster& cluster);
// What a prediction with the job's stack calibration should say: one line for each way the
// job differs from what the stack was fitted on (model family, precision and implementation
// first: a stack fitted on another of those may not carry over; then model, GPUs, cluster size,
// sequence, batch). Empty without a stack or when the job is the one it was fitted on.
std::vector<std::string> stack_notes(const Scenario& scenario);
// The job's stack calibration read from `file` (`--stack` on plan / simulate / sweep), in place
// of any the job named.
void set_stack(Job& job, const std::filesystem::path& file);
Json to_json(const Job& job);
Json to_json(const Scenario& scenario);
// The same records with the job's resolved architecture as "model_spec" beside its name, which
// parse_job reads back as the model: a scenario written so reads back to the same scenario with
// no catalog entry or config file to find (a job given by an {"hf_config": ...} or an inline
// architecture included; calibration paths made absolute). to_json(Job) stays without it: run
// fingerprints hash that text.
Json to_self_contained_json(const Job& job);
Json to_self_contained_json(const Scenario& scenario);

}  // namespace cephalo
