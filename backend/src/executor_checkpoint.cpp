// The executor's side of the checkpoint format (checkpoint.hpp): its shards out, and any
// checkpoint's shards re-sliced into this rank's slices of the current plan.
#include <cstring>
#include <set>

#include "cephalo/backend/checkpoint.hpp"
#include "cephalo/backend/executor.hpp"
#include "cephalo/backend/run_identity.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/traces/summarize.hpp"
#include "executor_impl.hpp"

namespace cephalo::backend {

namespace tr = cephalo::traces;

namespace {

CheckpointModel shape_of(const GptConfig& c) {
  CheckpointModel m;
  m.layers = c.layers;
  m.hidden = c.hidden;
  m.heads = c.heads;
  m.ffn = c.ffn;
  m.vocab = c.vocab;
  m.positions = c.position_rows();
  m.seq = c.seq;
  m.tied_head = c.tied_head;
  return m;
}

}  // namespace

RunIdentity Executor::identity() const {
  std::string run = impl_->opt.run_identity;
  if (run.empty()) {
    // An executor built without an agreed identity (one process, in code): the identity of
    // what it has, its scenario, plan and data seed.
    RunSettings settings;
    settings.data_seed = impl_->opt.data_seed;
    run = make_run_fingerprint(impl_->scenario, impl_->plan, "", settings).hex();
  }
  return {impl_->scenario.job.model_name, traces::plan_hash(impl_->plan), impl_->opt.data_seed,
          run};
}

void Executor::save_checkpoint(const std::filesystem::path& dir) {
  auto& I = *impl_;
  I.dev.synchronize();
  const auto step_dir = dir / step_dir_name(step_);
  if (I.rank == 0) {
    // A folder of this step from an earlier run of this lineage may hold more ranks' shards:
    // it goes before anything is written, so the new manifest never sits beside stale shards.
    std::error_code ec;
    std::filesystem::remove_all(step_dir, ec);
    if (ec)
      throw IoError("cannot remove old checkpoint " + step_dir.string() + ": " + ec.message());
    std::filesystem::create_directories(step_dir, ec);
    if (ec)
      throw IoError("cannot create checkpoint folder " + step_dir.string() + ": " + ec.message());
  }
  I.comm.barrier();
  // Every rank knows the whole layout (the offsets are the plan's): its shard's header names
  // the rank, its slices, the plan and the run, so a swapped or foreign shard is recognised.
  CheckpointManifest m;
  m.run = identity();
  m.step = step_;
  // Every checkpoint records the single-rank model (DESIGN §7: resumable under any plan), unit
  // by unit: in slices by their owners where those tile the unit (checkpoint_slices), else
  // assembled from its owners and written whole by one rank that holds it.
  std::string payload;
  for (int u = 0; u < I.units; ++u) {
    const std::int64_t n = model_->full_unit_numel(u);
    m.unit_numel.push_back(n);
    auto slices = I.checkpoint_slices(u);
    if (!slices.empty()) {
      m.offsets.push_back(std::move(slices));
      const std::int64_t own = m.offsets.back()[static_cast<std::size_t>(I.rank) + 1] -
                               m.offsets.back()[static_cast<std::size_t>(I.rank)];
      std::vector<float> host(static_cast<std::size_t>(own));
      for (Buffer* b : {&I.state->param(u), &I.state->m(u), &I.state->v(u)}) {
        if (own) I.dev.download(host.data(), b->slice(0, own), host.size() * 4);
        payload.append(reinterpret_cast<const char*>(host.data()), host.size() * 4);
      }
      continue;
    }
    const int writer = I.checkpoint_writer(u);
    std::vector<std::int64_t> off(static_cast<std::size_t>(I.ranks) + 1, 0);
    for (int r = writer + 1; r <= I.ranks; ++r) off[static_cast<std::size_t>(r)] = n;
    m.offsets.push_back(std::move(off));
    for (int k = 0; k < 3; ++k) {
      const auto values = I.assemble_unit(u, k);  // collective
      if (writer == I.rank)
        payload.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    }
  }
  const std::string bytes = render_shard_header(m, I.rank) + payload;
  write_file_atomically(step_dir / rank_file_name(I.rank), bytes);
  // Every rank's size and checksum to rank 0 (exact in doubles: sizes below 2^53, 32-bit
  // halves); the all-reduce also orders every shard on disk before the manifest.
  std::vector<double> info(static_cast<std::size_t>(3 * I.ranks), 0.0);
  const std::uint64_t sum = shard_checksum(bytes);
  info[static_cast<std::size_t>(3 * I.rank)] = static_cast<double>(bytes.size());
  info[static_cast<std::size_t>(3 * I.rank + 1)] = static_cast<double>(sum >> 32);
  info[static_cast<std::size_t>(3 * I.rank + 2)] = static_cast<double>(sum & 0xffffffffu);
  I.comm.all_reduce_host(info.data(), static_cast<int>(info.size()), ReduceOp::Sum);
  if (I.rank == 0) {
    m.adam_step = I.state->adam_step;
    m.loss_scale = I.scaler.scale();
    m.loss_scale_clean_steps = I.scaler.clean_steps();
    m.model = shape_of(model_->config());
    for (int r = 0; r < I.ranks; ++r) {
      const auto* x = &info[static_cast<std::size_t>(3 * r)];
      m.shards.push_back(
          {rank_file_name(r), static_cast<std::int64_t>(x[0]),
           (static_cast<std::uint64_t>(x[1]) << 32) | static_cast<std::uint64_t>(x[2])});
    }
    write_file_atomically(step_dir / "manifest.json", render_checkpoint_manifest(m));
    write_file_atomically(dir / "latest", step_dir_name(step_) + "\n");
  }
  I.comm.barrier();
}

void Executor::load_checkpoint(const std::filesystem::path& dir) {
  auto& I = *impl_;
  const LatestCheckpoint ck = read_latest_checkpoint(dir);
  std::vector<std::int64_t> numel;
  for (int u = 0; u < I.units; ++u) numel.push_back(model_->full_unit_numel(u));
  check_checkpoint_fits(ck, identity(), shape_of(model_->config()), numel);
  const auto& m = ck.manifest;
  // What this rank owns of each unit, as pieces of the single-rank units the checkpoint holds:
  // its slice's runs (one run without tensor parallelism), and a tied head's word-embedding
  // copy from unit 0's rows (a checkpoint records the embedding's, which the copy equals).
  struct Piece {
    int unit;           // the checkpoint's unit it comes from
    std::int64_t full;  // its first element there
    std::int64_t at;    // where it goes in this rank's owned slice
    std::int64_t count;
  };
  auto pieces_of = [&](int u) {
    std::vector<Piece> out;
    const std::int64_t lo = I.state->begin(u), hi = lo + I.state->owned(u);
    auto add = [&](int unit, std::int64_t full, std::int64_t local, std::int64_t count) {
      const std::int64_t a = std::max(lo, local), b = std::min(hi, local + count);
      if (a < b) out.push_back({unit, full + (a - local), a - lo, b - a});
    };
    for (const SliceRun& r : model_->slice_runs(u)) add(u, r.full, r.local, r.count);
    if (const auto copy = model_->word_embedding_copy(); u == model_->head_unit() && copy.count)
      add(0, model_->vocab_slice().begin * model_->config().hidden, copy.begin, copy.count);
    return out;
  };
  auto overlap = [&](const Piece& p, int o) {
    const auto& off = m.offsets[static_cast<std::size_t>(p.unit)];
    return std::make_pair(std::max(p.full, off[static_cast<std::size_t>(o)]),
                          std::min(p.full + p.count, off[static_cast<std::size_t>(o) + 1]));
  };
  // Every old shard this rank needs, read and verified before a byte of any is used.
  std::vector<std::string> shards(static_cast<std::size_t>(m.ranks()));
  std::vector<std::vector<Piece>> pieces;
  for (int u = 0; u < I.units; ++u) pieces.push_back(pieces_of(u));
  for (int o = 0; o < m.ranks(); ++o) {
    bool needed = false;
    for (const auto& unit : pieces)
      for (const Piece& p : unit)
        if (auto [a, b] = overlap(p, o); a < b) needed = true;
    // A shard that holds no data (a split run's ranks that write no unit) is needed by no rank,
    // yet its header still says whose it is: every rank verifies those too (a header's read).
    const bool header_only = m.shards[static_cast<std::size_t>(o)].bytes == m.shard_header_bytes();
    if (needed || header_only) shards[static_cast<std::size_t>(o)] = read_verified_shard(ck, o);
  }
  for (int u = 0; u < I.units; ++u) {
    const auto n = static_cast<std::size_t>(I.state->owned(u));
    std::vector<float> p(n), mm(n), vv(n);
    for (const Piece& piece : pieces[static_cast<std::size_t>(u)])
      for (int o = 0; o < m.ranks(); ++o) {
        const auto [a, b] = overlap(piece, o);
        if (a >= b) continue;
        const std::string& f = shards[static_cast<std::size_t>(o)];
        const std::int64_t olo =
            m.offsets[static_cast<std::size_t>(piece.unit)][static_cast<std::size_t>(o)];
        for (int k = 0; k < 3; ++k) {
          float* dst = (k == 0 ? p : k == 1 ? mm : vv).data() + piece.at + (a - piece.full);
          std::memcpy(dst, f.data() + m.shard_offset(o, piece.unit, k) + (a - olo) * 4,
                      static_cast<std::size_t>(b - a) * 4);
        }
      }
    I.state->restore(u, p.data(), mm.data(), vv.data());
  }
  // ZeRO-1 and none keep compute copies of the parameters: made again before the next step.
  I.resident_stale = true;
  I.state->adam_step = m.adam_step;
  // A loss scale only means something under fp16; a run resumed in another precision keeps 1.
  I.scaler.restore(m.loss_scale, m.loss_scale_clean_steps);
  step_ = m.step;
}

// Rank r's range of the single-rank unit u when the owners' slices tile it: the group-0 slices
// of the domains holding it, each the unit's own elements (no TP split, no word-embedding copy),
// consecutive in rank order from 0 to its size. Empty when they do not (the unit is then
// assembled). Read from the graph alone, so every rank decides alike.
std::vector<std::int64_t> Executor::Impl::checkpoint_slices(int u) const {
  const std::int64_t n = model.full_unit_numel(u);
  std::vector<std::int64_t> off{0};
  for (int r = 0; r < ranks; ++r) {
    const tr::ShardLayout& l = graph.layout_of(r);
    const int position = graph.layout_position(r);
    std::int64_t count = 0;
    if (graph.holds(r, u) && l.group_of(position) == 0) {
      if (l.numel(u) != n || graph.place(r).tensor_parallel != 1) return {};
      const tr::UnitSlice slice = l.slice(u, position);
      if (slice.offset != off.back()) return {};
      count = slice.count;
    }
    off.push_back(off.back() + count);
  }
  if (off.back() != n) return {};
  return off;
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
      if (r.replicated && place.tp_rank != 0) continue;
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
