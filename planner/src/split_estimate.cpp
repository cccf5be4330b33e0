#include "cephalo/planner/split_estimate.hpp"

#include <map>
#include <tuple>

#include "cephalo/core/schedule.hpp"

#include "plan_support.hpp"
#include "split_estimator_impl.hpp"

namespace cephalo::planner {
namespace {

using split_detail::CollectiveKind;
using split_detail::CollectiveRequest;
using split_detail::even_request;
using split_detail::NicChain;
using split_detail::shared_nic_ends;

std::string gib(double bytes) { return format_bytes(bytes); }

}  // namespace

SplitEstimate SplitEstimator::Impl::estimate(const ModelSplit& split, const SplitOptions& options,
                                             const EstimateLimits& limits) {
  const Cluster& cluster = scenario.cluster;
  const Job& job = scenario.job;
  const ModelSpec& model = job.model;
  const std::string file = options.split_file.empty() ? scenario.file.string() : options.split_file;
  check_model_split(split, split_context_for(scenario, node_of_rank, file, options.split_path));
  const int world = cluster.num_ranks();
  // The split's own stages, not a copy of their rank lists (the search prices thousands).
  const std::vector<PipelineStage> one_stage = split.stages.empty()
                                                   ? resolved_stages(split, model.num_layers, world)
                                                   : std::vector<PipelineStage>{};
  const std::vector<PipelineStage>& stages = split.stages.empty() ? one_stage : split.stages;
  const int p = static_cast<int>(stages.size());
  const int m = split.micro_batches;
  const int V = split.schedule.virtual_stages;
  const int seq = costmodels::effective_sequence(model, job.sequence_length);
  const Dtype compute = job.precision.compute;
  const double e_c = bytes_per_element(compute);
  const double e_r = bytes_per_element(job.precision.reduce);
  const auto& ranks = rank_table;
  const bool tied = model.tied_embeddings && model.vocab_size > 0;
  const double word_embedding = static_cast<double>(model.vocab_size) * model.hidden;
  const ReplicaBatches mode = options.replica_batches;
  const Orders& schedule_orders = stage_orders(p, m, split.schedule);
  const int deferred =
      pipeline::deferred_wgrad_micro_batches(job.implementation.defer_embedding_wgrad_compute,
                                             job.implementation.wgrad_deferral_limit, p, m);
  const std::vector<int>& peak = schedule_orders.peaks;

  SplitEstimate out;
  if (limits.describe) out.split = describe(split, world);
  out.stages.resize(static_cast<std::size_t>(p));
  if (mode != ReplicaBatches::Even) {
    out.allocation.micro_batch.assign(static_cast<std::size_t>(world), 0);
    out.allocation.state_share.assign(static_cast<std::size_t>(world), 0.0);
    out.allocation.sub_steps.assign(static_cast<std::size_t>(world), 1);
  }
  // Per virtual stage k = c·p + s, one micro-batch's forward and backward (the slowest
  // replica's).
  std::vector<pipeline::StageTimes> times(static_cast<std::size_t>(p * V));
  std::vector<StageRanks*> stage_facts(static_cast<std::size_t>(p));
  std::vector<Replicas> reps(static_cast<std::size_t>(p));
  std::vector<std::vector<std::size_t>> stage_segments(static_cast<std::size_t>(p));
  // Per stage, the slowest replica's units in forward order (the DP tail follows them).
  std::vector<std::vector<split_detail::UnitStep>> unit_steps(static_cast<std::size_t>(p));
  // Per stage, that replica's sub-steps per micro-batch (its units are one sub-step's).
  std::vector<int> unit_sub(static_cast<std::size_t>(p), 1);
  // Per stage, its units' parameter gathers before their first forward and those forwards
  // (full and hybrid sharding; empty otherwise), and where each chunk's units end.
  std::vector<std::vector<std::pair<double, double>>> unit_gathers(static_cast<std::size_t>(p));
  std::vector<std::vector<std::size_t>> chunk_ends(static_cast<std::size_t>(p));
  // Per stage whose DP group spans nodes: its forward gathers' chain (all issued at the start)
  // and its tail's collectives (the backward's re-gathers and reductions, the parameter
  // all-gather after the step), in seconds at full rate; the NICs it shares with other
  // stages' chains slow both.
  std::vector<double> gather_work(static_cast<std::size_t>(p), 0.0);
  std::vector<double> tail_work(static_cast<std::size_t>(p), 0.0);
  // The tied embedding's all-reduce pairs the first stage's embedding with the last stage's
  // head (traces' split builder: first among the unit's reductions on each side, on the comm
  // stream in order): per end, when its copy is ready relative to the end of the stage's last
  // backward, and the reductions queued behind it on that stage's comm stream.
  struct TiedEnd {
    double ready = 0, after = 0, after_step = 0;
  };
  std::vector<TiedEnd> tied_end(static_cast<std::size_t>(p));
  double tied_s = 0;

  for (int s = 0; s < p; ++s) {
    const PipelineStage& st = stages[static_cast<std::size_t>(s)];
    StageEstimate& est = out.stages[static_cast<std::size_t>(s)];
    const int T = split.tensor_parallel_of(static_cast<std::size_t>(s));
    const int replicas = static_cast<int>(st.ranks.size()) / T;
    StageRanks& sr = ranks_of(st.ranks, T);
    stage_facts[static_cast<std::size_t>(s)] = &sr;
    Replicas& rep = reps[static_cast<std::size_t>(s)];
    resolve_replicas(rep, sr, split, st, s, T, options, file);
    est.stage = s;
    est.gpu = rep.gpu_names;
    est.tensor_parallel = T;
    est.replicas = replicas;
    est.peak_in_flight = peak[static_cast<std::size_t>(s)];

    // Every class's pass at b samples in k sub-steps, remembered for this stage: k passes of
    // b / k samples each, as the graph runs them (its units one sub-step's).
    std::vector<std::map<std::pair<int, int>, StagePass>> passes(rep.classes.size());
    auto pass_of = [&](std::size_t cls, int b, int k) -> const StagePass& {
      auto it = passes[cls].find({b, k});
      if (it == passes[cls].end())
        it =
            passes[cls]
                .emplace(std::make_pair(b, k),
                         split_detail::repeated(stage_pass(split, st, s, T, sr, *rep.classes[cls],
                                                           rep.class_slowdown[cls], b / k, options),
                                                k))
                .first;
      return it->second;
    };
    // The stage's parameters and memory terms do not depend on the samples; its times do.
    const StagePass& probe = pass_of(0, rep.size.empty() ? 1 : rep.size.front(), 1);
    est.layers = probe.layers;
    est.parameters_per_rank = probe.params;
    // A replica's memory at b samples and state share x: costmodels' one rule for a split rank.
    const std::vector<std::vector<int>> units = costmodels::stage_units(model, st, s, p);
    ReplicaMemory memory_of(*this, split, T, units,
                            schedule_orders.orders[static_cast<std::size_t>(s)], options, file);
    if (mode == ReplicaBatches::BySpeed)
      deal_by_speed(rep, memory_of, !split.is_default(), split.sharding != ShardingKind::None,
                    pass_of);
    // The stage's step times: the slowest replica's, per chunk. Every replica of a segment
    // (Replicas::segments) has its first one's pass, memory and optimizer step.
    std::vector<std::size_t>& segments = stage_segments[static_cast<std::size_t>(s)];
    segments = rep.segments();
    std::size_t slowest = 0;
    double slowest_total = -1;
    int largest = 0;
    for (std::size_t k = 0, j = 0; k < segments.size(); j = segments[k++]) {
      largest = std::max(largest, rep.size[j]);
      if (rep.size[j] < 1) continue;
      const StagePass& ps = pass_of(rep.class_of[j], rep.size[j], rep.sub[j]);
      if (ps.total() > slowest_total) {
        slowest_total = ps.total();
        slowest = j;
      }
      for (int c = 0; c < V; ++c) {
        auto& t = times[static_cast<std::size_t>(c * p + s)];
        t.forward = std::max(t.forward, ps.chunks[static_cast<std::size_t>(c)].forward);
        t.backward = std::max(t.backward, ps.chunks[static_cast<std::size_t>(c)].backward);
        // The head's weight gradient, which the first `deferred` micro-batches leave to the flush.
        t.deferred_wgrad =
            std::max(t.deferred_wgrad, ps.chunks[static_cast<std::size_t>(c)].deferred_wgrad);
        t.deferred_micro_batches = t.deferred_wgrad > 0 ? deferred : 0;
      }
    }
    est.micro_batch = largest;
    est.replica_micro_batches = rep.size;
    const StagePass& ps =
        pass_of(rep.class_of[slowest], std::max(1, rep.size[slowest]), rep.sub[slowest]);
    unit_steps[static_cast<std::size_t>(s)] = ps.units;
    unit_sub[static_cast<std::size_t>(s)] = rep.sub[slowest];
    chunk_ends[static_cast<std::size_t>(s)] = ps.chunk_ends;
    est.replicated_forward = ps.replicated_forward;
    est.replicated_backward = ps.replicated_backward;
    est.tp_bytes_per_collective = ps.tp_bytes;
    est.forward_compute = ps.forward_compute;
    est.backward_compute = ps.backward_compute;
    est.tp_comm_forward = ps.tp_comm_forward;
    est.tp_comm_backward = ps.tp_comm_backward;
    est.tp_collectives_forward = ps.f_calls;
    est.tp_collectives_backward = ps.b_calls;

    for (const auto& g : rep.groups)
      for (std::size_t j : g)
        if (std::fabs(rep.share[j] - 1.0 / static_cast<double>(g.size())) > 1e-12)
          rep.even_shares = false;
    if (mode != ReplicaBatches::Even)
      for (std::size_t k = 0, begin = 0; k < segments.size(); begin = segments[k++]) {
        // Shares of the domain: a hybrid group's, over the number of groups.
        const double share = rep.share[begin] / static_cast<double>(rep.groups.size());
        for (std::size_t i = begin * static_cast<std::size_t>(T);
             i < segments[k] * static_cast<std::size_t>(T); ++i) {
          const auto r = static_cast<std::size_t>(st.ranks[i]);
          out.allocation.micro_batch[r] = rep.size[begin];
          out.allocation.sub_steps[r] = rep.sub[begin];
          out.allocation.state_share[r] = share;
        }
      }

    // Memory of one rank per replica (its tightest), by the one rule; the stage reports its
    // tightest replica (of alike ones at the same samples and share, the first).
    double tightest = -1;
    for (std::size_t k = 0, j = 0; k < segments.size(); j = segments[k++]) {
      StageMemory mem;
      mem.rank = rep.capacity_rank[j];
      mem.capacity = rep.capacity[j];
      mem.terms = memory_of.terms(rep, j, std::max(1, rep.size[j]), rep.sub[j], rep.share[j]);
      for (const auto& term : mem.terms) {
        mem.total += term.bytes;
        if (term.name == "activations") mem.activations += term.bytes;
      }
      const double ratio = mem.total / mem.capacity;
      if (ratio > tightest) {
        tightest = ratio;
        est.memory = std::move(mem);
      }
    }
    const StageMemory& mem = est.memory;
    if (out.fits && (mem.total > mem.capacity || rep.unplaced())) {
      out.fits = false;
      std::ostringstream msg;
      if (rep.unplaced()) {
        msg << "stage " << s << " does not fit: its replicas cannot hold " << rep.total
            << " samples per micro-batch with the state (" << est.gpu << ")";
      } else {
        msg << "stage " << s << " does not fit: rank " << mem.rank << " (" << est.gpu << ") needs "
            << gib(mem.total) << " of " << gib(mem.capacity) << " (";
        bool first = true;
        for (const auto& term : mem.terms) {
          if (term.bytes <= 0) continue;
          msg << (first ? "" : ", ") << term.name << " " << gib(term.bytes);
          first = false;
        }
        msg << "; activations of " << est.peak_in_flight
            << (V > 1 ? " chunk passes" : " micro-batches") << " in flight)";
      }
      out.refusal = msg.str();
    }
  }

  // P2P: one transfer per boundary between adjacent virtual stages.
  std::vector<pipeline::Transfer> transfers(static_cast<std::size_t>(p * V - 1));
  if (p > 1) {
    // What boundary a -> a + 1 sends: one flow per TP rank (1/T with scatter-gather), and at
    // once from the sending stage's first node, each of its ranks there one flow, or with
    // replicas of unequal samples their samples' bytes.
    struct Boundary {
      double full = 0, per_flow = 0, from_node = 0;
      bool scatter = false;
    };
    const auto boundary = [&](int a) {
      const int c = (a + 1) % p;
      const StageEstimate& from = out.stages[static_cast<std::size_t>(a)];
      const int T = from.tensor_parallel;
      Boundary bd;
      bd.full = static_cast<double>(from.micro_batch) * seq * model.hidden * e_c;
      bd.scatter = options.scatter_gather && T > 1 &&
                   out.stages[static_cast<std::size_t>(c)].tensor_parallel == T;
      // Without scatter/gather, as the graph sends it: every receiving TP rank its own copy,
      // 1/T of it under sequence parallelism (the boundary is split along the sequence).
      const bool split_sequence = !bd.scatter && split.sequence_parallel && T > 1;
      bd.per_flow = bd.scatter || split_sequence ? bd.full / T : bd.full;
      const Replicas& rep = reps[static_cast<std::size_t>(a)];
      bd.from_node =
          rep.uniform
              ? bd.per_flow *
                    std::max(1, stage_facts[static_cast<std::size_t>(a)]->stage_on_first_node)
              : (bd.scatter || split_sequence ? 1.0 : T) * seq * model.hidden * e_c *
                    static_cast<double>(rep.samples_on_first_node());
      return bd;
    };
    const auto node_of = [&](int stage) {
      return ranks[static_cast<std::size_t>(
                       stage_facts[static_cast<std::size_t>(stage)]->tp.front())]
          .node;
    };
    // Each boundary's transfer: within a node its own flow, across nodes every flow the
    // sending stage's ranks on its node send at once, through both nodes' NICs, which the
    // schedule then holds first come, first served (a NIC carries one boundary's transfer at
    // a time: the simulator shares it among every flow on it, so flows on one NIC end no
    // sooner in sum).
    transfers.assign(static_cast<std::size_t>(p * V - 1), {});
    for (int k = 0; k + 1 < p * V; ++k) {
      const int a = k % p, c = (k + 1) % p;
      const Boundary bd = boundary(a);
      StageRanks& rc = *stage_facts[static_cast<std::size_t>(c)];
      const int src = stage_facts[static_cast<std::size_t>(a)]->tp.front(), dst = rc.tp.front();
      const int src_node = node_of(a), dst_node = node_of(c);
      pipeline::Transfer& x = transfers[static_cast<std::size_t>(k)];
      if (src_node != dst_node) x.links = {src_node, dst_node};
      x.seconds = collective(
          split_detail::p2p_request(src, dst, src_node == dst_node ? bd.per_flow : bd.from_node));
      // The receivers' all-gather runs on their node's own links, the NICs free again.
      if (bd.scatter) x.after = stage_collective(rc, 0, CollectiveKind::AllGather, bd.full);
      out.p2p_s = std::max(out.p2p_s, x.seconds + x.after);
    }
  }

  // Everything of a stage that does not need the schedule's timing: the DP tail, the optimizer
  // step, memory. Then a lower bound on the iteration: a stage runs its steps one after another,
  // so its last backward ends no earlier than the sum of its steps (m · Σ over its virtual
  // stages of forward + backward), and it finishes its DP tail and optimizer step after that.
  for (int s = 0; s < p; ++s) {
    StageEstimate& est = out.stages[static_cast<std::size_t>(s)];
    const Replicas& rep = reps[static_cast<std::size_t>(s)];
    const int T = est.tensor_parallel, R = est.replicas;

    // DP group 0 of the stage: the first rank of every TP group. The stage's T groups run
    // their collectives at once, so a group spanning nodes shares each NIC with the others.
    StageRanks& sr = *stage_facts[static_cast<std::size_t>(s)];
    const double sharing =
        sr.group_spans_nodes ? static_cast<double>(sr.stage_on_first_node) / sr.group_on_first_node
                             : 1.0;
    const double P = est.parameters_per_rank;
    const bool none = split.sharding == ShardingKind::None;
    // One DP collective of `elements` per TP rank as the stage's graph runs it.
    // Each priced once per stage layout and size: a stage's layers are alike, and pricing one
    // walks every sharding group of the stage (12,800 node groups in a 100k-GPU hybrid stage).
    StageRanks::Layout& layout = layout_of(sr, split.sharding, rep.share);
    const auto state_collective = [&](CollectiveKind kind, double elements, double bytes_each,
                                      double variant_elements = -1) {
      const auto key =
          std::make_tuple(static_cast<int>(kind), elements, bytes_each, variant_elements, sharing);
      if (const auto it = layout.collectives.find(key); it != layout.collectives.end())
        return it->second;
      if (!layout.kinds) layout.kinds = group_kinds(sr, rep);
      const double t = dp_collective(sr, rep, *layout.kinds, split.sharding, kind, elements,
                                     bytes_each, sharing, variant_elements);
      layout.collectives.emplace(key, t);
      return t;
    };
    const auto cross = [&](double elements) {
      const auto key = std::make_tuple(elements, e_r, sharing);
      if (const auto it = layout.cross.find(key); it != layout.cross.end()) return it->second;
      const double t = cross_reduction(sr, rep, elements, e_r, sharing);
      layout.cross.emplace(key, t);
      return t;
    };
    // A unit's gradient reduction: an all-reduce without sharding, else a reduce-scatter in
    // each sharding group, then under hybrid the all-reduce across the groups.
    const auto reduction = [&](double elements, double variant_elements = -1) {
      return none ? state_collective(CollectiveKind::AllReduce, elements, e_r)
                  : state_collective(CollectiveKind::ReduceScatter, elements, e_r,
                                     variant_elements) +
                        cross(elements);
    };
    double dp = 0, dp_exposed = 0, after_step = 0;
    if (R > 1 && options.dp_overlap == DpOverlap::PerUnit) {
      // As the graph runs them (traces' split builder): each unit's gradient reduction (an
      // all-reduce, or a reduce-scatter when sharded) right after the unit's last backward, one
      // at a time on the comm stream, under the rest of the stage's last backward; what runs
      // past its end is exposed. Under `optimizer` the updated parameters are all-gathered
      // after the step; under `full` and `hybrid` each unit is gathered before its first
      // forward (prefetched, every stage's from the iteration's start): a stage's first
      // forward waits for what the gathers do not hide, which delays the whole pipeline.
      // A one-stage T = 1 fully sharded split is an FSDP plan, whose graph gathers each unit
      // again for its backward (layered accumulation), the next unit's gather issued on the
      // comm stream when a unit's backward starts, ahead of that unit's reduce-scatter: the
      // backward waits for what the gathers do not hide.
      const bool regathers = split.is_default();
      const auto& units = unit_steps[static_cast<std::size_t>(s)];
      const auto gather = [&](const split_detail::UnitStep& u) {
        return state_collective(CollectiveKind::AllGather, u.params, e_c, u.layout_params());
      };
      // The FSDP graph's layered accumulation runs a unit's every micro-batch in its phase, so
      // a phase hides m micro-batches' compute; the head's backward gather is issued when the
      // last layer's forward ends (the gather lookahead), under the head's forward phase.
      // A replica in k sub-steps runs every unit's backward k times in its last backward step,
      // the reductions after the last sub-step's (an FSDP plan's phases hold all m · k).
      const int k = unit_sub[static_cast<std::size_t>(s)];
      const double phase = regathers ? static_cast<double>(m) * k : 1.0;
      // A deferred output-layer weight gradient (the last stage's head, units.back()): the
      // last micro-batch's head backward without it when that one is deferred, the flush of
      // every deferred one after the stage's last backward, the head's reduction after that.
      const bool defers = s == p - 1 && deferred > 0 && !units.empty() && units.back().wgrad > 0;
      const double wgrad = defers && deferred == m ? units.back().wgrad : 0.0;
      const double flush = defers ? static_cast<double>(deferred) * k * units.back().wgrad : 0.0;
      double earlier = 0;  // the last backward step's sub-steps before its last
      if (!regathers)
        for (const auto& u : units) earlier += (k - 1) * u.backward;
      earlier -= (k - 1) * wgrad;
      double head_reduction = 0;
      double end = 0, done = earlier, compute = earlier, queued = 0;
      const double head_gather = regathers && !units.empty() ? gather(units.back()) : 0;
      double gathered = regathers && !units.empty()
                            ? std::max(0.0, head_gather - phase * units.back().forward)
                            : 0;
      end = gathered;
      dp += head_gather;
      for (auto u = units.rbegin(); u != units.rend(); ++u) {
        const bool head = defers && u == units.rbegin();
        const double backward = u->backward - (head ? wgrad : 0.0);
        const double begin = std::max(compute, gathered);
        compute = begin + phase * backward;
        done += phase * backward;
        if (regathers && std::next(u) != units.rend()) {
          const double g = gather(*std::next(u));
          gathered = std::max(end, begin) + g;
          end = gathered;
          dp += g;
        }
        if (std::next(u) == units.rend()) queued = std::max(end, compute);
        const double d = reduction(u->params, u->layout_params());
        dp += d;
        if (head) {  // its gradient is complete after the flush
          head_reduction = d;
          continue;
        }
        end = std::max(end, compute) + d;
        // The first stage's embedding copy waits for the reductions queued before it; the last
        // stage's head copy goes first, every reduction of the stage queued behind it.
        if (s == 0 && std::next(u) == units.rend()) tied_end[0].after = d;
        if (s == p - 1 && s > 0) tied_end[static_cast<std::size_t>(s)].after += d;
      }
      if (defers) {
        compute += flush;
        done += flush;
        end = std::max(end, compute) + head_reduction;
        // The head's copy of a tied embedding goes after the flush, its reduction behind it.
        tied_end[static_cast<std::size_t>(s)].after = head_reduction;
      }
      dp_exposed = std::max(0.0, end - done);
      if (s == 0) tied_end[0].ready = std::max(0.0, queued - done);
      tail_work[static_cast<std::size_t>(s)] = dp;
      if (split.sharding == ShardingKind::Optimizer) {
        after_step = state_collective(CollectiveKind::AllGather, P, e_c);
        tied_end[static_cast<std::size_t>(s)].after_step = after_step;
        dp += after_step;
        tail_work[static_cast<std::size_t>(s)] += after_step;
      } else if (!none) {
        auto& gathers = unit_gathers[static_cast<std::size_t>(s)];
        for (std::size_t i = 0; i < units.size(); ++i) {
          const auto& u = units[i];
          const double g =
              state_collective(CollectiveKind::AllGather, u.params, e_c, u.layout_params());
          gathers.emplace_back(g, phase * u.forward);
          gather_work[static_cast<std::size_t>(s)] += g;
          dp += g;
        }
      }
    } else if (R > 1) {
      dp = reduction(P) + (none ? 0.0 : state_collective(CollectiveKind::AllGather, P, e_c));
      tail_work[static_cast<std::size_t>(s)] = dp;
    }
    const double reductions = dp;
    if (tied && p > 1 && (s == 0 || s == p - 1)) {
      const int a = stage_facts.front()->tp.front(), c = stage_facts.back()->tp.front();
      const bool same_node =
          ranks[static_cast<std::size_t>(a)].node == ranks[static_cast<std::size_t>(c)].node;
      const double bytes = word_embedding / T * e_r * (same_node ? 1.0 : T);
      tied_s = collective(even_request(CollectiveKind::AllReduce, {a, c}, bytes));
      dp += tied_s;
      if (s == p - 1) {
        // The head's copy is ready when the head's last backward ends, the rest of the stage's
        // last backward before the stage's end.
        const auto& units = unit_steps[static_cast<std::size_t>(s)];
        double rest = 0, head_wgrad = units.empty() ? 0.0 : units.back().wgrad;
        for (std::size_t i = 0; i + 1 < units.size(); ++i) rest += units[i].backward;
        // Deferred: when the flush ends, which ends the stage's backward work.
        tied_end[static_cast<std::size_t>(s)].ready = deferred > 0 && head_wgrad > 0 ? 0.0 : -rest;
      }
    }
    est.dp_comm = dp;
    const double last_backward = times[static_cast<std::size_t>(s)].backward;
    // The tied embedding's all-reduce runs after the reductions.
    est.dp_exposed =
        options.dp_overlap == DpOverlap::LastBackward ? std::max(0.0, dp - last_backward)
        : options.dp_overlap == DpOverlap::PerUnit    ? dp_exposed + (dp - reductions) + after_step
                                                      : dp;
    // The optimizer step over each replica's shard on its own device: the slowest one's.
    est.optimizer_step = 0;
    // A replica's shard is its share of its sharding group's state (hybrid: of its node's
    // copy), each (GPU type, share) priced once.
    std::vector<std::pair<std::size_t, double>> priced;
    const std::vector<std::size_t>& segments = stage_segments[static_cast<std::size_t>(s)];
    for (std::size_t k = 0, j = 0; k < segments.size(); j = segments[k++]) {
      const double x = split.sharding == ShardingKind::None ? 1.0 : rep.share[j];
      const std::pair<std::size_t, double> alike{rep.class_of[j], x};
      if (std::find(priced.begin(), priced.end(), alike) != priced.end()) continue;
      priced.push_back(alike);
      const double shard = P * x;
      const std::size_t cls = rep.class_of[j];
      est.optimizer_step =
          std::max(est.optimizer_step,
                   models.compute->optimizer_time(*rep.classes[cls], job, shard).seconds *
                       rep.class_slowdown[cls]);
    }
    double steps = 0;
    for (int c = 0; c < V; ++c) {
      const auto& t = times[static_cast<std::size_t>(c * p + s)];
      steps += t.forward + t.backward;
    }
    out.lower_bound_s =
        std::max(out.lower_bound_s, m * steps + est.dp_exposed + est.optimizer_step);
  }
  // The bound has a margin for rounding: the schedule sums the same step times in another order.
  if ((!out.fits && !limits.schedule_unfit) || out.lower_bound_s > limits.stop_above * (1 + 1e-9)) {
    out.complete = false;
    return out;
  }

  // Each stage's gathers from the iteration's start (`work`: seconds at full rate), stretched
  // by what sharing the same NICs with other stages' adds to its chain (1 where none shares).
  std::vector<NicChain> chains;
  std::vector<int> chain_stage;
  const auto stretch_of = [&](const std::vector<double>& work) {
    chains.clear();
    chain_stage.clear();
    for (int s = 0; s < p; ++s) {
      const auto z = static_cast<std::size_t>(s);
      if (!stage_facts[z]->group_spans_nodes || work[z] <= 0) continue;
      chains.push_back({0.0, work[z], &stage_facts[z]->group_nodes});
      chain_stage.push_back(s);
    }
    std::vector<double> k(static_cast<std::size_t>(p), 1.0);
    if (chains.size() > 1) {
      const std::vector<double> ends = shared_nic_ends(chains, nic_users);
      for (std::size_t i = 0; i < chains.size(); ++i)
        k[static_cast<std::size_t>(chain_stage[i])] = ends[i] / chains[i].work;
    }
    return k;
  };
  const std::vector<double> stretch = stretch_of(gather_work);  // a later chunk's (below)
  // The first micro-batch's forward on each stage as the graph runs it: each unit after its
  // gather, which the prefetch rule (schedule::gather_gates, units in first-use order) issues
  // at the start or once its gate unit's forward is done, so a later stage's gathers past the
  // lookahead wait for that micro-batch; those of the start share the NICs. The chain floors
  // the stage's first forward in the schedule, holding no other step.
  const schedule::GatherRules rules =
      schedule::gather_rules(scenario.job.implementation.framework, true);
  std::vector<std::vector<int>> gates(static_cast<std::size_t>(p));
  std::vector<double> issued(static_cast<std::size_t>(p), 0.0);  // gathers issued at the start
  std::vector<schedule::GatherPhase> phases;
  for (int s = 0; s < p; ++s) {
    const auto z = static_cast<std::size_t>(s);
    const std::size_t n = unit_gathers[z].empty() ? 0 : chunk_ends[z].front();
    phases.clear();
    for (std::size_t i = 0; i < n; ++i) phases.push_back({unit_steps[z][i].layout_params(), false});
    if (n > 0) gates[z] = schedule::gather_gates(rules, phases);
    for (std::size_t i = 0; i < n; ++i)
      if (gates[z][i] < 0) issued[z] += unit_gathers[z][i].first;
  }
  const std::vector<double> issued_stretch = stretch_of(issued);
  std::vector<double> forward_end;
  double arrival = 0;  // of the first micro-batch at the stage
  for (int s = 0; s < p; ++s) {
    const auto z = static_cast<std::size_t>(s);
    const auto& all = unit_gathers[z];
    const auto& gate = gates[z];
    pipeline::StageTimes& t = times[z];
    double end = arrival + t.forward;
    if (!gate.empty()) {
      forward_end.assign(gate.size(), 0.0);
      double gathered = 0, computed = arrival, plain = 0;
      for (std::size_t i = 0; i < gate.size(); ++i) {
        const double issue = gate[i] < 0 ? 0.0 : forward_end[static_cast<std::size_t>(gate[i])];
        gathered = std::max(gathered, issue) + all[i].first * (gate[i] < 0 ? issued_stretch[z] : 1);
        computed = std::max(computed, gathered) + all[i].second;
        forward_end[i] = computed;
        plain += all[i].second;
      }
      // Each unit's forward there is its phase's (m micro-batches' in a one-stage FSDP plan).
      end = std::max(end, computed - plain + t.forward);
      t.first_forward_end = end;
    }
    if (s + 1 < p) arrival = end + transfers[z].seconds + transfers[z].after;
  }
  const pipeline::PipelineTiming timing =
      pipeline::pipeline_makespan(p, m, split.schedule, times, transfers);
  out.makespan_s = timing.makespan;
  out.bubble_fraction = timing.bubble_fraction();
  if (limits.describe) out.schedule = pipeline::describe(p, m, split.schedule, times, out.p2p_s);
  for (int s = 0; s < p; ++s) {
    StageEstimate& est = out.stages[static_cast<std::size_t>(s)];
    est.last_backward_end = timing.finish[static_cast<std::size_t>(s)];  // a flush after it
    est.busy = timing.busy[static_cast<std::size_t>(s)];
    est.bubble = timing.bubble[static_cast<std::size_t>(s)];
  }
  // A later chunk's first forward waits for its units' gathers too, issued after the earlier
  // chunks' from the start: a stage whose gathers run past that forward's start in the
  // schedule stalls the pipeline by the most any such forward ends later.
  double chunk_delay = 0;
  for (int s = 0; s < p && V > 1; ++s) {
    const auto& all = unit_gathers[static_cast<std::size_t>(s)];
    if (all.empty()) continue;
    const auto& ends = chunk_ends[static_cast<std::size_t>(s)];
    const auto& order = schedule_orders.orders[static_cast<std::size_t>(s)];
    const double k = stretch[static_cast<std::size_t>(s)];
    double gathered = 0;
    std::size_t u = 0;
    for (std::size_t c = 0; c < ends.size(); ++c) {
      std::size_t i = 0;
      while (i < order.size() &&
             !(order[i].pass == pipeline::Pass::Forward && order[i].chunk == static_cast<int>(c)))
        ++i;
      const double begin = i < order.size() ? timing.start[static_cast<std::size_t>(s)][i] : 0.0;
      double gated = begin, plain = begin;
      for (; u < ends[c] && u < all.size(); ++u) {
        gathered += all[u].first * k;
        gated = std::max(gated, gathered) + all[u].second;
        plain += all[u].second;
      }
      if (c > 0) chunk_delay = std::max(chunk_delay, gated - plain);
    }
  }
  for (int s = 0; s < p; ++s) {
    StageEstimate& est = out.stages[static_cast<std::size_t>(s)];
    est.finish = est.last_backward_end + chunk_delay + est.dp_exposed + est.optimizer_step;
  }
  // The tied all-reduce is one collective of both ends: it starts when the later copy is ready
  // (the first stage's, whose last backward ends the pipeline), and each end's reductions queued
  // behind it on the comm stream run after it, the optimizer step after them.
  if (tied && p > 1 && options.dp_overlap == DpOverlap::PerUnit) {
    const auto ready = [&](int s) {
      const StageEstimate& est = out.stages[static_cast<std::size_t>(s)];
      return est.last_backward_end + chunk_delay + tied_end[static_cast<std::size_t>(s)].ready;
    };
    const double tied_done = std::max(ready(0), ready(p - 1)) + tied_s;
    for (int s : {0, p - 1}) {
      StageEstimate& est = out.stages[static_cast<std::size_t>(s)];
      const TiedEnd& end = tied_end[static_cast<std::size_t>(s)];
      const double later = tied_done + end.after + end.after_step + est.optimizer_step - est.finish;
      if (later <= 0) continue;
      est.dp_exposed += later;
      est.finish += later;
    }
  }
  // The tails: each stage's collectives as one chain ending where its exposed part ends (before
  // the optimizer step); stages whose DP groups cross the same NICs share them, and what that
  // adds to a chain's end is exposed.
  chains.clear();
  chain_stage.clear();
  for (int s = 0; s < p; ++s) {
    const StageEstimate& est = out.stages[static_cast<std::size_t>(s)];
    const double work = tail_work[static_cast<std::size_t>(s)];
    if (!stage_facts[static_cast<std::size_t>(s)]->group_spans_nodes || work <= 0) continue;
    const double ends = est.finish - est.optimizer_step;
    chains.push_back({ends - work, work, &stage_facts[static_cast<std::size_t>(s)]->group_nodes});
    chain_stage.push_back(s);
  }
  if (chains.size() > 1) {
    const std::vector<double> ends = shared_nic_ends(chains, nic_users);
    for (std::size_t i = 0; i < chains.size(); ++i) {
      StageEstimate& est = out.stages[static_cast<std::size_t>(chain_stage[i])];
      const double later = ends[i] - (chains[i].release + chains[i].work);
      est.dp_exposed += later;
      est.finish += later;
    }
  }
  for (const StageEstimate& est : out.stages)
    out.iteration_s = std::max(out.iteration_s, est.finish);
  return out;
}

}  // namespace cephalo::planner
