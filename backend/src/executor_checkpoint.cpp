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
  for (int u = 0; u < I.units; ++u) {
    m.unit_numel.push_back(model_.unit_numel(u));
    m.offsets.push_back(I.state->checkpoint_offsets(u));
  }
  const std::string bytes = render_shard_header(m, I.rank) + I.state->serialize();
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
    m.model = shape_of(model_.config());
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
  for (int u = 0; u < I.units; ++u) numel.push_back(model_.unit_numel(u));
  check_checkpoint_fits(ck, identity(), shape_of(model_.config()), numel);
  const auto& m = ck.manifest;
  auto overlap = [&](int u, int o) {
    const std::int64_t lo = I.state->begin(u), hi = lo + I.state->owned(u);
    const auto& off = m.offsets[static_cast<std::size_t>(u)];
    return std::make_pair(std::max(lo, off[static_cast<std::size_t>(o)]),
                          std::min(hi, off[static_cast<std::size_t>(o) + 1]));
  };
  // Every old shard this rank needs, read and verified before a byte of any is used.
  std::vector<std::string> shards(static_cast<std::size_t>(m.ranks()));
  for (int o = 0; o < m.ranks(); ++o)
    for (int u = 0; u < I.units; ++u)
      if (auto [a, b] = overlap(u, o); a < b) {
        shards[static_cast<std::size_t>(o)] = read_verified_shard(ck, o);
        break;
      }
  for (int u = 0; u < I.units; ++u) {
    const std::int64_t lo = I.state->begin(u);
    const auto n = static_cast<std::size_t>(I.state->owned(u));
    std::vector<float> p(n), mm(n), vv(n);
    for (int o = 0; o < m.ranks(); ++o) {
      const auto [a, b] = overlap(u, o);
      if (a >= b) continue;
      const std::string& f = shards[static_cast<std::size_t>(o)];
      const std::int64_t olo = m.offsets[static_cast<std::size_t>(u)][static_cast<std::size_t>(o)];
      for (int k = 0; k < 3; ++k) {
        float* dst = (k == 0 ? p : k == 1 ? mm : vv).data() + (a - lo);
        std::memcpy(dst, f.data() + m.shard_offset(o, u, k) + (a - olo) * 4,
                    static_cast<std::size_t>(b - a) * 4);
      }
    }
    I.state->restore(u, p.data(), mm.data(), vv.data());
  }
  I.state->adam_step = m.adam_step;
  // A loss scale only means something under fp16; a run resumed in another precision keeps 1.
  I.scaler.restore(m.loss_scale, m.loss_scale_clean_steps);
  step_ = m.step;
}

}  // namespace cephalo::backend
