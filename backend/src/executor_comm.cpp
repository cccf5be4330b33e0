// The executor's collectives and transfers, each run where the graph's program puts it: the
// data-parallel gathers and reduce-scatters of the collective's segments over this rank's
// group, the cross-group all-reduce of its pieces, the tied embedding's all-reduce, and the
// pipeline's sends and receives. Everything about the schedule is the graph's (traces/); what
// is decided here is only where the data lives on this rank.
#include <algorithm>

#include "cephalo/core/error.hpp"
#include "executor_impl.hpp"

namespace cephalo::backend {

namespace tr = cephalo::traces;

namespace {

// The communicator's name of an uneven graph variant.
UnevenCollective uneven_of(tr::CollectiveVariant v) {
  return v == tr::CollectiveVariant::Padded ? UnevenCollective::Padded : UnevenCollective::Grouped;
}

}  // namespace

// Gather unit u's shards of the parameters (or gradients) into `full` (unit_numel elements, of
// full's element type) on stream `s`. A shard of another type is cast into a transient send
// buffer first (mixed precision: the fp32 master shard travels in the compute type).
void Executor::Impl::gather_shard(Stream& s, Communicator& group, int u, tr::CollectiveVariant v,
                                  bool gradients, TensorRef full) {
  const std::int64_t n = state->owned(u);
  TensorRef shard = (gradients ? state->grad(u) : state->param(u)).slice(0, n);
  Buffer send;
  if (shard.type != full.type) {
    send = dev.allocate(static_cast<std::size_t>(n), full.type);
    if (n) dev.cast(s, shard, send.ref());
    shard = send.ref();
  }
  // The graph's variant: Even takes the even collective (MPI_Allgather / ncclAllGather);
  // Grouped and Padded the -v call run that way (the variant the graph builder resolved and the
  // simulator priced; under the plan's auto, the comm model's choice).
  if (v == tr::CollectiveVariant::Even)
    group.all_gather(s, shard, full);
  else
    group.all_gather_v(s, shard, full, state->counts(u), uneven_of(v));
  retire(std::move(send), s);
}

// Reduce a full gradient onto the owners and add it into this rank's accumulator.
void Executor::Impl::reduce_shard(Stream& s, Communicator& group, int u, tr::CollectiveVariant v,
                                  TensorRef full) {
  const std::int64_t n = state->owned(u);
  Buffer tmp = gradient(n);
  if (v == tr::CollectiveVariant::Even)
    group.reduce_scatter(s, full, tmp.ref(), ReduceOp::Sum);
  else
    group.reduce_scatter_v(s, full, tmp.ref(), state->counts(u), ReduceOp::Sum, uneven_of(v));
  if (n) dev.axpy(s, 1.0f, tmp.ref(), state->grad(u).slice(0, n));
  retire(std::move(tmp), s);
}

// The resident compute copies (executor_impl.hpp), made again after the initialisation or a
// resume: gathered with the step pass's variant, or cast from the master shard.
void Executor::Impl::refresh_resident() {
  bool any = false;
  for (int u = 0; u < units; ++u) {
    const std::size_t k = static_cast<std::size_t>(u);
    if (!resident_kept[k]) continue;
    any = true;
    auto& r = resident[k];
    if (!r) r = activation(model.unit_numel(u));
    if (resident_gathered[k])
      gather_shard(dev.stream(StreamKind::Comm), *dp, u, resident_variant[k], false, r.ref());
    else
      dev.cast(dev.stream(StreamKind::Compute), state->param(u).slice(0, state->owned(u)), r.ref());
  }
  if (any) {
    dev.synchronize();
    retired.clear();
  }
  resident_stale = false;
}

// A collective moves the graph's segments of its buffer, each with its own variant.
void Executor::Impl::run_comm(std::size_t i, const tr::Op& op) {
  auto& s = dev.stream(StreamKind::Comm);
  const tr::Collective& c = graph.collectives()[static_cast<std::size_t>(op.collective)];
  const auto& segs = op_segments[i];
  const int u = op.unit;
  switch (op.kind) {
    case tr::OpKind::AllGather:
    case tr::OpKind::AllGatherV: {
      Buffer full = activation(segs.back().offset + segs.back().numel);
      for (const auto& seg : segs)
        gather_shard(s, *dp, seg.unit, seg.variant, false, full.slice(seg.offset, seg.numel));
      // A gather of the step pass (ZeRO-1) refreshes the resident parameters.
      if (op.pass == tr::Pass::Step) {
        retire(std::move(resident[static_cast<std::size_t>(u)]), s);
        resident[static_cast<std::size_t>(u)] = std::move(full);
      } else {
        gathered.push_back({op.phase, std::move(full), &segs});
      }
      break;
    }
    case tr::OpKind::ReduceScatter:
    case tr::OpKind::ReduceScatterV: {
      // Zeros when this rank ran no backward into it (fewer micro-batches, no samples).
      auto it = grads.find(i);
      if (it == grads.end()) {
        Buffer g = gradient(segs.back().offset + segs.back().numel);
        dev.fill(dev.stream(StreamKind::Compute), g.ref(), 0.0f);
        it = grads.emplace(i, std::move(g)).first;
      }
      for (const auto& seg : segs)
        reduce_shard(s, *dp, seg.unit, seg.variant, it->second.slice(seg.offset, seg.numel));
      retire(std::move(it->second), s);
      grads.erase(it);
      break;
    }
    case tr::OpKind::AllReduce: {
      // The unit's gradient shard, reduced within the group already, summed across groups: one
      // in-place all-reduce per piece over its owners, in offset order (every rank issues the
      // pieces of a unit in the same global order, so the blocking collectives cannot
      // deadlock).
      TensorRef shard = state->grad(u).slice(0, state->owned(u));
      for (const CrossPieceRun& p : pieces.at(static_cast<std::size_t>(u)))
        p.comm->all_reduce(s, shard.slice(p.offset, p.count), ReduceOp::Sum);
      break;
    }
    case tr::OpKind::TiedAllReduce: {
      // The word embedding's gradient of the first stage and of the last stage's copy, summed
      // on both before either reduces over its domain.
      const auto ms = graph.members(c);
      Communicator* pair = tied.at({ms[0].rank, ms[1].rank});
      TensorRef g = grads_of(i, op, u);
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

// A transfer moves the rows of the samples both replicas hold of the pipeline micro-batch
// (DESIGN §4, "Pipeline transfers"): its place in each side's buffers follows from the
// replicas' sample ranges, the same overlap the graph builder cut the transfers by, and each
// side's sub-steps (its micro-batches of that pipeline micro-batch) cut it into parts.
std::vector<Executor::Impl::TransferPart> Executor::Impl::transfer_parts(const tr::Op& op) const {
  const tr::Collective& c = graph.collectives()[static_cast<std::size_t>(op.collective)];
  const auto ms = graph.members(c);
  const int m = graph.summary().pipeline_micro_batches;
  struct Side {
    std::int64_t first, last, size;
    int sub;
  };
  auto side = [&](int r) {
    const RankPlace& p = graph.place(r);
    const auto& off = replica_offsets[static_cast<std::size_t>(p.stage)];
    const PlanRank& row = plan.ranks[static_cast<std::size_t>(r)];
    return Side{off[static_cast<std::size_t>(p.replica)],
                off[static_cast<std::size_t>(p.replica) + 1], row.micro_batch, row.sub_steps(m)};
  };
  const Side a = side(ms[0].rank), b = side(ms[1].rank);
  const Side& me = ms[0].rank == rank ? a : b;
  const std::int64_t lo = std::max(a.first, b.first), hi = std::min(a.last, b.last);
  const std::int64_t row = rows_per_sample * model.config().hidden;
  if (hi <= lo ||
      static_cast<double>((hi - lo) * row) * element_size(compute_type) != c.total_bytes)
    throw RuntimeFailure("executor: transfer " + graph.op_name(op.id) + " moves " +
                         std::to_string(c.total_bytes) + " bytes, the replicas overlap in " +
                         std::to_string(hi - lo) + " samples");
  // The next sub-step boundary of a side after sample x.
  auto next = [](const Side& s, std::int64_t x) {
    return s.first + ((x - s.first) / s.size + 1) * s.size;
  };
  std::vector<TransferPart> parts;
  for (std::int64_t x = lo; x < hi;) {
    const std::int64_t end = std::min({hi, next(a, x), next(b, x)});
    const std::int64_t j = (x - me.first) / me.size;
    parts.push_back(
        {op.micro_batch * me.sub + static_cast<int>(j), x - me.first - j * me.size, end - x});
    x = end;
  }
  return parts;
}

void Executor::Impl::run_transfer(const tr::Op& op) {
  const tr::Collective& c = graph.collectives()[static_cast<std::size_t>(op.collective)];
  const auto ms = graph.members(c);
  const int from = ms[0].rank, to = ms[1].rank;
  const bool forward = op.pass == tr::Pass::Forward, sending = op.kind == tr::OpKind::Send;
  // Forward: a send carries the chunk's output (into unit + 1), a receive the chunk's input
  // (into unit); backward the other way round.
  const int b = forward == sending ? op.unit + 1 : op.unit;
  const std::int64_t row = rows_per_sample * model.config().hidden;
  Communicator* link = links.at({from, to});
  auto& buffers = forward ? act : dact;
  for (const TransferPart& part : transfer_parts(op)) {
    Buffer& buf = buffers[static_cast<std::size_t>(b)][static_cast<std::size_t>(part.mb)];
    if (sending) {
      auto& s = dev.stream(StreamKind::Send);
      link->send(s, buf.slice(part.at * row, part.samples * row), 1);
      if (--sends_left[send_key(forward, b, part.mb)] == 0) retire(std::move(buf), s);
    } else {
      auto& s = dev.stream(StreamKind::Recv);
      if (!buf) buf = activation(rows(part.mb) * model.config().hidden);
      link->recv(s, buf.slice(part.at * row, part.samples * row), 0);
    }
  }
}

}  // namespace cephalo::backend
