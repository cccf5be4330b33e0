// The executor under a model split (DESIGN §4, "A split in the plan and the graph"): this
// rank's tensor-parallel slice of its pipeline stage's units, its data-parallel domain's
// collectives, the pipeline's transfers and the tied embedding's all-reduce, each run where the
// graph's program puts it. Everything about the schedule is the graph's (traces/graph_split):
// the order of steps, which transfers carry which samples, which collectives run over which
// group. What is decided here is only where the data lives on this rank.
#include <algorithm>
#include <set>
#include <tuple>

#include "cephalo/core/error.hpp"
#include "executor_impl.hpp"

namespace cephalo::backend {

namespace tr = cephalo::traces;

namespace {

// Sends of a boundary's activation (forward) or its gradient (backward) for one micro-batch.
std::array<int, 3> send_key(bool forward, int boundary, int micro_batch) {
  return {forward ? 1 : 0, boundary, micro_batch};
}

}  // namespace

TensorParallel tensor_parallel_of(const tr::TrainingGraph& graph, const GptConfig& config,
                                  Communicator& comm, std::unique_ptr<Communicator>& tp_comm) {
  const tr::GraphSummary& sum = graph.summary();
  if (!sum.split) return {};
  const int ranks = graph.num_ranks();
  if (comm.size() != ranks)
    throw RuntimeFailure("executor: the split graph has " + std::to_string(ranks) +
                         " ranks, the communicator " + std::to_string(comm.size()));
  // Everything a rank could refuse is checked for every rank before the first collective, so
  // that all refuse alike instead of some waiting in a split the others never reach.
  ModelSplit what_runs;  // the graph's split, as far as backend_split_refusal reads it
  what_runs.sequence_parallel = sum.sequence_parallel;
  if (const std::string why = backend_split_refusal(what_runs); !why.empty())
    throw InfeasibleError(why +
                          "; drop it to run the plan, or simulate it with `cephalo simulate`");
  for (int r = 0; r < ranks; ++r) {
    const RankPlace& p = graph.place(r);
    if (const auto why = GptModel::tensor_parallel_refusal(config, p.tensor_parallel); !why.empty())
      throw InfeasibleError("stage " + std::to_string(p.stage) + ": " + why);
  }
  const int me = comm.rank();
  const RankPlace& mine = graph.place(me);
  // The TP group: the ranks of this stage's replica, coloured by the lowest of them.
  int colour = ranks;
  for (int r = 0; r < ranks; ++r)
    if (graph.place(r).stage == mine.stage && graph.place(r).replica == mine.replica)
      colour = std::min(colour, r);
  tp_comm = comm.split(colour, mine.tp_rank);
  if (!tp_comm || tp_comm->size() != mine.tensor_parallel || tp_comm->rank() != mine.tp_rank)
    throw RuntimeFailure("executor: the tensor-parallel communicator of rank " +
                         std::to_string(me) + " does not match its group");
  const int head = sum.num_units - 1;
  return {mine.tensor_parallel, mine.tp_rank, tp_comm.get(),
          config.tied_head && sum.pipeline_stages > 1 && graph.holds(me, head)};
}

void Executor::Impl::setup_split() {
  const tr::GraphSummary& sum = graph.summary();
  sp.place = graph.place(rank);
  const int m = sum.pipeline_micro_batches;
  // Each stage's replicas hold consecutive samples of every micro-batch, in replica order.
  sp.replica_offsets.assign(static_cast<std::size_t>(sum.pipeline_stages), {});
  std::vector<std::vector<int>> sizes(static_cast<std::size_t>(sum.pipeline_stages));
  for (int r = 0; r < ranks; ++r) {
    const RankPlace& p = graph.place(r);
    auto& v = sizes[static_cast<std::size_t>(p.stage)];
    if (static_cast<int>(v.size()) <= p.replica) v.resize(static_cast<std::size_t>(p.replica) + 1);
    v[static_cast<std::size_t>(p.replica)] = plan.ranks[static_cast<std::size_t>(r)].micro_batch;
  }
  sp.samples_per_micro_batch = m > 0 ? plan.global_batch() / m : 0;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    auto& off = sp.replica_offsets[s];
    off.push_back(0);
    for (int n : sizes[s]) off.push_back(off.back() + n);
    if (off.back() != sp.samples_per_micro_batch)
      throw RuntimeFailure("executor: stage " + std::to_string(s) + "'s replicas run " +
                           std::to_string(off.back()) + " samples of a micro-batch of " +
                           std::to_string(sp.samples_per_micro_batch));
  }

  // The data-parallel group: this rank's group of its domain's layout, coloured by its first
  // member's global rank (groups are disjoint, so colours are unique), numbered in slice order.
  const tr::ShardLayout& layout = graph.layout_of(rank);
  const int position = graph.layout_position(rank);
  const auto global = graph.layout_ranks(rank);
  const auto members = layout.group(layout.group_of(position));
  const int key =
      static_cast<int>(std::find(members.begin(), members.end(), position) - members.begin());
  auto dp = comm.split(global[static_cast<std::size_t>(members.front())], key);
  if (!dp || dp->size() != static_cast<int>(members.size()) || dp->rank() != key)
    throw RuntimeFailure("executor: the data-parallel communicator of rank " +
                         std::to_string(rank) + " does not match its group");
  sp.dp = dp.get();
  sp.owned.push_back(std::move(dp));

  // Cross-group pieces (hybrid, or none over several ranks): every domain's owner sets, as
  // global ranks in group order, split from the world in one order all ranks share.
  std::set<std::vector<int>> sets;
  for (int r = 0; r < ranks; ++r) {
    if (graph.layout_position(r) != 0) continue;  // each domain once
    const tr::ShardLayout& l = graph.layout_of(r);
    if (!l.hybrid()) continue;
    const auto g = graph.layout_ranks(r);
    for (int u = 0; u < units; ++u)
      for (const auto& p : l.pieces(u)) {
        std::vector<int> owners;
        for (int o : l.owners(p)) owners.push_back(g[static_cast<std::size_t>(o)]);
        sets.insert(owners);
      }
  }
  std::map<std::vector<int>, Communicator*> by_set;
  for (const auto& owners : sets) {
    const auto at = std::find(owners.begin(), owners.end(), rank);
    auto part = comm.split(at != owners.end() ? 0 : -1, static_cast<int>(at - owners.begin()));
    if ((at != owners.end()) != (part != nullptr))
      throw RuntimeFailure("executor: the split of a cross-group piece disagrees with the layout");
    if (part) {
      by_set[owners] = part.get();
      sp.owned.push_back(std::move(part));
    }
  }
  sp.pieces.assign(static_cast<std::size_t>(units), {});
  if (layout.hybrid())
    for (int u = 0; u < units; ++u) {
      const tr::UnitSlice mine = layout.slice(u, position);
      for (const auto& p : layout.pieces(u)) {
        const auto owners = layout.owners(p);
        if (owners[static_cast<std::size_t>(layout.group_of(position))] != position) continue;
        std::vector<int> g;
        for (int o : owners) g.push_back(global[static_cast<std::size_t>(o)]);
        sp.pieces[static_cast<std::size_t>(u)].push_back(
            {p.offset - mine.offset, p.count, by_set.at(g)});
      }
    }

  // Two-rank communicators: one per direction of every pipeline link (its sender is rank 0),
  // so a link's sends and receives never share a communicator with the other direction (NCCL,
  // communicator.hpp), and one per tied pair (first stage's rank, last stage's). Made in rounds
  // in which no rank is in two pairs, one world split per round.
  std::vector<std::tuple<int, int, bool>> pairs;  // (from / first, to / last, tied)
  for (const auto& c : graph.collectives()) {
    if (c.kind != tr::OpKind::Send && c.kind != tr::OpKind::TiedAllReduce) continue;
    const auto ms = graph.members(c);
    pairs.emplace_back(ms[0].rank, ms[1].rank, c.kind == tr::OpKind::TiedAllReduce);
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  std::vector<std::set<int>> rounds;
  std::vector<std::size_t> round_of(pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto [a, b, tied] = pairs[i];
    std::size_t k = 0;
    while (k < rounds.size() && (rounds[k].count(a) || rounds[k].count(b))) ++k;
    if (k == rounds.size()) rounds.emplace_back();
    rounds[k].insert({a, b});
    round_of[i] = k;
  }
  for (std::size_t k = 0; k < rounds.size(); ++k) {
    int colour = -1, key = 0;
    std::size_t mine = 0;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const auto [a, b, tied] = pairs[i];
      if (round_of[i] != k || (a != rank && b != rank)) continue;
      colour = static_cast<int>(i);
      key = a == rank ? 0 : 1;
      mine = i;
    }
    auto part = comm.split(colour, key);
    if ((colour >= 0) != (part != nullptr) || (part && part->size() != 2))
      throw RuntimeFailure("executor: a pipeline link's split disagrees with the graph");
    if (!part) continue;
    const auto [a, b, tied] = pairs[mine];
    (tied ? sp.tied : sp.links)[{a, b}] = part.get();
    sp.owned.push_back(std::move(part));
  }

  // The variant of each unit's gather in this rank's group (ZeRO-1 gathers the resident
  // parameters outside the step too, with the graph's variant).
  sp.gather_variant.assign(static_cast<std::size_t>(units), tr::CollectiveVariant::Even);
  for (const auto& op : graph.program(rank))
    if (op.kind == tr::OpKind::AllGather || op.kind == tr::OpKind::AllGatherV)
      sp.gather_variant[static_cast<std::size_t>(op.unit)] =
          graph.collectives()[static_cast<std::size_t>(op.collective)].variant;
  sp.resident.resize(static_cast<std::size_t>(units));
  sp.resident_stale = true;
}

void Executor::Impl::split_prepare_data(int step) {
  tokens.clear();
  targets.clear();
  const int head = model.head_unit();
  if (!graph.holds(rank, 0) && !graph.holds(rank, head)) return;
  const auto& cfg = model.config();
  const std::int64_t first = sp.replica_offsets[static_cast<std::size_t>(sp.place.stage)]
                                               [static_cast<std::size_t>(sp.place.replica)];
  for (int mb = 0; mb < static_cast<int>(mb_sizes.size()); ++mb) {
    const std::int64_t n = rows(mb);
    std::vector<std::int32_t> tok(static_cast<std::size_t>(n)), tgt(static_cast<std::size_t>(n));
    // Micro-batch mb holds the global batch's samples [mb · G/m, (mb + 1) · G/m); this replica
    // its consecutive share of them.
    const std::int64_t sample = mb * sp.samples_per_micro_batch + first;
    for (int i = 0; i < mb_sizes[static_cast<std::size_t>(mb)]; ++i)
      synthetic_sample(cfg, opt.data_seed, step, sample + i, tok.data() + i * cfg.seq,
                       tgt.data() + i * cfg.seq);
    tokens.push_back(dev.allocate(static_cast<std::size_t>(n), ElemType::I32));
    targets.push_back(dev.allocate(static_cast<std::size_t>(n), ElemType::I32));
    dev.upload(tokens.back().ref(), tok.data(), tok.size() * 4);
    dev.upload(targets.back().ref(), tgt.data(), tgt.size() * 4);
  }
}

void Executor::Impl::split_begin_step() {
  if (sp.resident_stale) refresh_resident();
  const std::size_t mbs = mb_sizes.size();
  // (clear + resize: buffers move, they do not copy)
  for (auto* v : {&sp.act, &sp.dact}) {
    v->clear();
    v->resize(static_cast<std::size_t>(units) + 1);
    for (auto& per_boundary : *v) per_boundary.resize(mbs);
  }
  sp.head.clear();
  sp.head.resize(mbs);
  sp.gathered.clear();
  sp.grads.clear();
  sp.sends_left.clear();
  for (const auto& op : graph.program(rank)) {
    if (op.kind != tr::OpKind::Send) continue;
    const bool forward = op.pass == tr::Pass::Forward;
    ++sp.sends_left[send_key(forward, forward ? op.unit + 1 : op.unit, op.micro_batch)];
  }
}

void Executor::Impl::refresh_resident() {
  const StageSharding kind = graph.summary().stage_sharding;
  if (kind == StageSharding::Optimizer || kind == StageSharding::None) {
    auto& s = dev.stream(kind == StageSharding::None ? StreamKind::Compute : StreamKind::Comm);
    for (int u = 0; u < units; ++u) {
      auto& r = sp.resident[static_cast<std::size_t>(u)];
      if (!graph.holds(rank, u)) continue;
      // none in fp32 computes on the master weights themselves.
      if (kind == StageSharding::None && compute_type == ElemType::F32) continue;
      if (!r) r = activation(model.unit_numel(u));
      if (kind == StageSharding::None)
        dev.cast(s, state->param(u).slice(0, state->owned(u)), r.ref());
      else
        gather_shard(s, *sp.dp, u, sp.gather_variant[static_cast<std::size_t>(u)], false, r.ref());
    }
    dev.synchronize();
    retired.clear();
  }
  sp.resident_stale = false;
}

TensorRef Executor::Impl::split_params(int u) {
  switch (graph.summary().stage_sharding) {
    case StageSharding::Full:
    case StageSharding::Hybrid: {
      auto it = sp.gathered.find(u);
      if (it == sp.gathered.end())
        throw RuntimeFailure("executor: unit " + std::to_string(u) + " is not gathered on rank " +
                             std::to_string(rank));
      return it->second.ref();
    }
    case StageSharding::Optimizer:
      return sp.resident[static_cast<std::size_t>(u)].ref();
    case StageSharding::None:
      if (sp.resident[static_cast<std::size_t>(u)])
        return sp.resident[static_cast<std::size_t>(u)].ref();
      return state->param(u).slice(0, state->owned(u));
  }
  return {};
}

TensorRef Executor::Impl::split_grads(int u) {
  // none: the rank's shard is the whole unit (zeroed at the step's start): backwards accumulate
  // into it and the all-reduce runs on it, as the graph charges (no unsharded copy beside it).
  if (graph.summary().stage_sharding == StageSharding::None) {
    if (state->owned(u) != model.unit_numel(u))
      throw RuntimeFailure("executor: under none sharding rank " + std::to_string(rank) + " owns " +
                           std::to_string(state->owned(u)) + " of unit " + std::to_string(u) +
                           "'s " + std::to_string(model.unit_numel(u)) + " elements");
    return state->grad(u).slice(0, state->owned(u));
  }
  auto it = sp.grads.find(u);
  if (it == sp.grads.end()) {
    Buffer g = gradient(model.unit_numel(u));
    dev.fill(dev.stream(StreamKind::Compute), g.ref(), 0.0f);
    it = sp.grads.emplace(u, std::move(g)).first;
  }
  return it->second.ref();
}

void Executor::Impl::run_split_compute(const tr::Op& op) {
  // The optimizer step belongs to no micro-batch (its micro_batch is -1): rows() is undefined.
  if (op.kind == tr::OpKind::OptimizerStep) {
    split_optimizer_step();
    return;
  }
  const int u = op.unit, mb = op.micro_batch, head = model.head_unit();
  const std::size_t ub = static_cast<std::size_t>(u), m = static_cast<std::size_t>(mb);
  const std::int64_t n = rows(mb) * model.config().hidden;
  auto& cs = dev.stream(StreamKind::Compute);
  // A tied head on the embedding's stage uses unit 0's wte; on another stage its own copy.
  const bool head_uses_unit0 = model.config().tied_head && model.word_embedding_copy().count == 0;
  // Mean token loss over the global batch, times the fp16 loss scale.
  const float grad_scale = static_cast<float>(
      scaler.scale() / (static_cast<double>(plan.global_batch()) * rows_per_sample));
  switch (op.kind) {
    case tr::OpKind::Forward: {
      if (u == head) {
        const double loss = model.head_forward(
            dev, split_params(u), head_uses_unit0 ? split_params(0) : TensorRef{},
            sp.act[ub][m].ref(), targets[m].ref(), rows(mb), nullptr);
        // Every TP rank computes the same loss: one of them counts it.
        if (sp.place.tp_rank == 0) loss_sum += loss;
        break;
      }
      Buffer y = activation(n);
      if (u == 0) {
        model.embedding_forward(dev, split_params(0), tokens[m].ref(), y.ref(), rows(mb));
      } else {
        LayerActivations scratch;
        LayerActivations& acts = graph.recomputes(u) ? scratch : saved[ub][m];
        model.layer_forward(dev, split_params(u), sp.act[ub][m].ref(), y.ref(), acts, rows(mb));
        if (graph.recomputes_attention_core(u)) model.drop_attention_core(acts);
      }
      sp.act[ub + 1][m] = std::move(y);
      // An output that leaves the stage goes with its last send; this TP rank may send none.
      if (!graph.holds(rank, u + 1) && sp.sends_left[send_key(true, u + 1, mb)] == 0)
        retire(std::move(sp.act[ub + 1][m]), cs);
      break;
    }
    case tr::OpKind::Recompute: {
      if (u == head) {
        // The head's forward again, keeping what its backward reads (its 3 TP calls here).
        model.head_forward(dev, split_params(u), head_uses_unit0 ? split_params(0) : TensorRef{},
                           sp.act[ub][m].ref(), targets[m].ref(), rows(mb), &sp.head[m]);
      } else if (graph.recomputes_attention_core(u)) {
        model.recompute_attention_core(dev, saved[ub][m], rows(mb));
      } else if (u >= 1) {
        Buffer y = activation(n);
        model.layer_forward(dev, split_params(u), sp.act[ub][m].ref(), y.ref(), saved[ub][m],
                            rows(mb));
        retire(std::move(y), cs);
      }
      break;
    }
    case tr::OpKind::Backward: {
      if (u == head) {
        Buffer dx = activation(n);
        model.head_backward(dev, split_params(u), head_uses_unit0 ? split_params(0) : TensorRef{},
                            sp.act[ub][m].ref(), targets[m].ref(), rows(mb), grad_scale, sp.head[m],
                            dx.ref(), split_grads(u),
                            head_uses_unit0 ? split_grads(0) : TensorRef{});
        sp.dact[ub][m] = std::move(dx);
        retire(std::move(sp.act[ub][m]), cs);
      } else if (u >= 1) {
        Buffer dx = activation(n);
        model.layer_backward(dev, split_params(u), split_grads(u), sp.act[ub][m].ref(),
                             saved[ub][m], sp.dact[ub + 1][m].ref(), dx.ref(), rows(mb));
        retire(std::move(sp.dact[ub + 1][m]), cs);
        sp.dact[ub][m] = std::move(dx);
        retire(std::move(sp.act[ub][m]), cs);
        saved[ub][m] = LayerActivations{};
      } else {
        model.embedding_backward(dev, split_grads(0), tokens[m].ref(), sp.dact[1][m].ref(),
                                 rows(mb));
        retire(std::move(sp.dact[1][m]), cs);
      }
      // An input gradient that leaves the stage goes with its last send.
      if (u > 0 && !graph.holds(rank, u - 1) && sp.sends_left[send_key(false, u, mb)] == 0)
        retire(std::move(sp.dact[ub][m]), cs);
      break;
    }
    default:
      throw RuntimeFailure("executor: op " + graph.op_name(op.id) + " is not a compute op");
  }
}

// A transfer moves the rows of the samples both replicas hold of the micro-batch (DESIGN §4,
// "Pipeline transfers"): its place in each side's buffer follows from the replicas' sample
// ranges, the same overlap the graph builder cut the transfers by.
void Executor::Impl::run_split_transfer(const tr::Op& op) {
  const tr::Collective& c = graph.collectives()[static_cast<std::size_t>(op.collective)];
  const auto ms = graph.members(c);
  const int from = ms[0].rank, to = ms[1].rank, mb = op.micro_batch;
  const bool forward = op.pass == tr::Pass::Forward, sending = op.kind == tr::OpKind::Send;
  // Forward: a send carries the chunk's output (into unit + 1), a receive the chunk's input
  // (into unit); backward the other way round.
  const int b = forward == sending ? op.unit + 1 : op.unit;
  auto range = [&](int r) {
    const RankPlace& p = graph.place(r);
    const auto& off = sp.replica_offsets[static_cast<std::size_t>(p.stage)];
    return std::make_pair(off[static_cast<std::size_t>(p.replica)],
                          off[static_cast<std::size_t>(p.replica) + 1]);
  };
  const auto [a0, a1] = range(from);
  const auto [b0, b1] = range(to);
  const std::int64_t lo = std::max(a0, b0), hi = std::min(a1, b1);
  const std::int64_t row = rows_per_sample * model.config().hidden;
  const std::int64_t count = (hi - lo) * row;
  if (hi <= lo || static_cast<double>(count) * element_size(compute_type) != c.total_bytes)
    throw RuntimeFailure("executor: transfer " + graph.op_name(op.id) + " moves " +
                         std::to_string(c.total_bytes) + " bytes, the replicas overlap in " +
                         std::to_string(hi - lo) + " samples");
  const std::int64_t at = (lo - (sending ? a0 : b0)) * row;
  Communicator* link = sp.links.at({from, to});
  auto& buffers = forward ? sp.act : sp.dact;
  Buffer& buf = buffers[static_cast<std::size_t>(b)][static_cast<std::size_t>(mb)];
  if (sending) {
    auto& s = dev.stream(StreamKind::Send);
    link->send(s, buf.slice(at, count), 1);
    if (--sp.sends_left[send_key(forward, b, mb)] == 0) retire(std::move(buf), s);
  } else {
    auto& s = dev.stream(StreamKind::Recv);
    if (!buf) buf = activation(rows(mb) * model.config().hidden);
    link->recv(s, buf.slice(at, count), 0);
  }
}

void Executor::Impl::run_split_comm(const tr::Op& op) {
  auto& s = dev.stream(StreamKind::Comm);
  const tr::Collective& c = graph.collectives()[static_cast<std::size_t>(op.collective)];
  const int u = op.unit;
  switch (op.kind) {
    case tr::OpKind::AllGather:
    case tr::OpKind::AllGatherV: {
      Buffer full = activation(model.unit_numel(u));
      gather_shard(s, *sp.dp, u, c.variant, false, full.ref());
      // ZeRO-1's gather after the optimizer step refreshes the resident parameters.
      if (op.pass == tr::Pass::Step) {
        retire(std::move(sp.resident[static_cast<std::size_t>(u)]), s);
        sp.resident[static_cast<std::size_t>(u)] = std::move(full);
      } else {
        sp.gathered[u] = std::move(full);
      }
      break;
    }
    case tr::OpKind::ReduceScatter:
    case tr::OpKind::ReduceScatterV: {
      TensorRef g = split_grads(u);  // zeros when this rank ran no backward of the unit
      reduce_shard(s, *sp.dp, u, c.variant, g);
      retire(std::move(sp.grads.at(u)), s);
      sp.grads.erase(u);
      break;
    }
    case tr::OpKind::AllReduce: {
      TensorRef shard = state->grad(u).slice(0, state->owned(u));
      for (const CrossPieceRun& p : sp.pieces.at(static_cast<std::size_t>(u)))
        p.comm->all_reduce(s, shard.slice(p.offset, p.count), ReduceOp::Sum);
      break;
    }
    case tr::OpKind::TiedAllReduce: {
      // The word embedding's gradient of the first stage and of the last stage's copy, summed
      // on both before either reduces over its domain.
      const auto ms = graph.members(c);
      Communicator* pair = sp.tied.at({ms[0].rank, ms[1].rank});
      TensorRef g = split_grads(u);
      const auto& wte = model.unit_slots(0)[0];
      const auto copy = model.word_embedding_copy();
      TensorRef part = u == 0 ? g.slice(wte.offset, wte.numel) : g.slice(copy.begin, copy.count);
      pair->all_reduce(s, part, ReduceOp::Sum);
      break;
    }
    default:
      throw RuntimeFailure("executor: unsupported collective " + graph.op_name(op.id));
  }
}

void Executor::Impl::split_optimizer_step() {
  auto& cs = dev.stream(StreamKind::Compute);
  optimizer_step();
  // none in a compute type other than fp32 computes on a cast of the updated master weights.
  if (graph.summary().stage_sharding == StageSharding::None && compute_type != ElemType::F32)
    for (int u = 0; u < units; ++u)
      if (sp.resident[static_cast<std::size_t>(u)])
        dev.cast(cs, state->param(u).slice(0, state->owned(u)),
                 sp.resident[static_cast<std::size_t>(u)].ref());
}

int Executor::Impl::checkpoint_writer(int u) const {
  for (int r = 0; r < ranks; ++r) {
    const tr::ShardLayout& l = graph.layout_of(r);
    if (graph.holds(r, u) && l.group_of(graph.layout_position(r)) == 0 &&
        graph.place(r).tp_rank == 0)
      return r;
  }
  throw RuntimeFailure("executor: no rank holds unit " + std::to_string(u));
}

std::vector<float> Executor::Impl::assemble_unit(int u, int which) {
  // Every rank of the domains' group 0 (one copy of the state) puts what it owns of the unit at
  // its single-rank places, replicated elements from TP rank 0 only; one sum over the world
  // (every element has one contributor, so the sum is exact) gives every rank the unit.
  auto& s = dev.stream(StreamKind::Comm);
  const std::int64_t N = model.full_unit_numel(u);
  Buffer full = f32(N);
  dev.fill(s, full.ref(), 0.0f);
  const tr::ShardLayout& layout = graph.layout_of(rank);
  if (graph.holds(rank, u) && layout.group_of(graph.layout_position(rank)) == 0) {
    const std::int64_t lo = state->begin(u), hi = lo + state->owned(u);
    TensorRef src = which == 0   ? state->param(u).ref()
                    : which == 1 ? state->m(u).ref()
                    : which == 2 ? state->v(u).ref()
                                 : state->grad(u).ref();
    for (const SliceRun& r : model.slice_runs(u)) {
      if (r.replicated && sp.place.tp_rank != 0) continue;
      const std::int64_t a = std::max(lo, r.local), b = std::min(hi, r.local + r.count);
      if (a >= b) continue;
      TensorRef from = src.slice(a - lo, b - a), to = full.slice(r.full + (a - r.local), b - a);
      if (from.type == to.type)
        dev.copy(s, to, from);
      else
        dev.cast(s, from, to);
    }
  }
  comm.all_reduce(s, full.ref(), ReduceOp::Sum);
  s.synchronize();
  std::vector<float> host(static_cast<std::size_t>(N));
  dev.download(host.data(), full.ref(), host.size() * 4);
  return host;
}

}  // namespace cephalo::backend
