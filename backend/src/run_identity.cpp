#include "cephalo/backend/run_identity.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "cephalo/backend/checkpoint.hpp"
#include "cephalo/backend/training_session.hpp"
#include "cephalo/traces/summarize.hpp"

#ifndef CEPHALO_VERSION
#error "CEPHALO_VERSION is set by backend/CMakeLists.txt from the project version"
#endif

namespace cephalo::backend {
namespace {

namespace fs = std::filesystem;

RunIdentityField field(std::string name, const std::string& canonical, std::string shown) {
  return {std::move(name), XXH64(canonical.data(), canonical.size(), 0), std::move(shown)};
}

std::string hex64(std::uint64_t v) { return checksum_hex(v); }

// Paths compare as the absolute, lexically normal form: `D` and `./D/` are one folder.
std::string folder(const fs::path& p) {
  if (p.empty()) return "";
  std::error_code ec;
  const fs::path a = fs::absolute(p, ec);
  return (ec ? p : a).lexically_normal().string();
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// "1, 2, 3" (at most 8 ranks, then how many more).
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < 8; ++i)
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) out += std::string(" and ") + std::to_string(ranks.size() - 8) + " more";
  return out;
}

}  // namespace

std::uint64_t RunFingerprint::hash() const {
  XXH64_state_t* s = XXH64_createState();
  XXH64_reset(s, 0);
  for (const auto& f : fields) {
    XXH64_update(s, f.name.data(), f.name.size());
    XXH64_update(s, &f.hash, sizeof f.hash);
  }
  const std::uint64_t h = XXH64_digest(s);
  XXH64_freeState(s);
  return h;
}

std::string RunFingerprint::hex() const { return hex64(hash()); }

std::string binary_version() {
  return std::string("cephalo ") + CEPHALO_VERSION + " (checkpoint format " +
         std::to_string(kCheckpointVersion) + ")";
}

RunFingerprint make_run_fingerprint(const Scenario& sc, const Plan& plan,
                                    const std::string& plan_file, const RunSettings& s) {
  RunFingerprint fp;
  // The scenario by content, not file name: its name and the cluster it describes.
  fp.fields.push_back(field("scenario", sc.name + "\n" + to_json(sc.cluster).dump(),
                            std::string("\"") + clip(sc.name, 60) + "\""));
  // The job with its resolved model (two files under one scenario name may give two
  // learning rates or two architectures); the model's `source` names a file, not a shape.
  ModelSpec model = sc.job.model;
  model.source.clear();
  const std::string job = Json{{"job", to_json(sc.job)}, {"model", to_json(model)}}.dump();
  std::ostringstream job_shown;
  job_shown << "model " << sc.job.model_name << ", seq " << sc.job.sequence_length
            << ", global batch " << sc.job.global_batch << ", learning rate "
            << number(sc.job.optimizer.learning_rate) << ", job hash "
            << hex64(XXH64(job.data(), job.size(), 0));
  fp.fields.push_back(field("job", job, job_shown.str()));
  const std::string ph = traces::plan_hash(plan);
  fp.fields.push_back(field("plan", ph, "plan " + ph + " (" + clip(plan_file, 120) + ")"));
  fp.fields.push_back(
      field("steps", std::to_string(s.steps), std::string("--steps ") + std::to_string(s.steps)));
  fp.fields.push_back(field("seed", std::to_string(s.data_seed),
                            std::string("--seed ") + std::to_string(s.data_seed)));
  fp.fields.push_back(field("precision", s.device + "\n" + number(s.loss_scale),
                            "--device " + s.device + ", --loss-scale " + number(s.loss_scale)));
  const std::string ckpt = folder(s.checkpoint_dir) + "\n" + std::to_string(s.checkpoint_every) +
                           "\n" + (s.overwrite_checkpoints ? "overwrite" : "keep") + "\n" +
                           folder(s.resume);
  std::string ckpt_shown = s.checkpoint_dir.empty()
                               ? "no --checkpoint-dir"
                               : std::string("--checkpoint-dir ") +
                                     clip(folder(s.checkpoint_dir), 80) + " every " +
                                     std::to_string(s.checkpoint_every) +
                                     (s.overwrite_checkpoints ? ", --overwrite-checkpoints" : "");
  if (!s.resume.empty()) ckpt_shown += std::string(", --resume ") + clip(folder(s.resume), 80);
  fp.fields.push_back(field("checkpoint", ckpt, ckpt_shown));
  const std::string dumps =
      std::string(s.dump_params ? "--dump-params " : "") + (s.dump_grads ? "--dump-grads" : "");
  fp.fields.push_back(
      field("dumps", dumps, dumps.empty() ? "no --dump-params or --dump-grads" : dumps));
  fp.fields.push_back(field("binary", binary_version(), binary_version()));
  return fp;
}

void agree_run_identity(Communicator& comm, const RunFingerprint& mine) {
  const int n = comm.size(), me = comm.rank();
  if (n == 1) return;
  // 1. Rank 0's fields (name and hash per line) to every rank.
  std::string packet;
  if (me == 0)
    for (const auto& f : mine.fields) packet += f.name + " " + hex64(f.hash) + "\n";
  comm.broadcast_host(packet, 0);
  std::vector<std::pair<std::string, std::string>> root;
  std::istringstream in(packet);
  for (std::string name, hash; in >> name >> hash;) root.emplace_back(name, hash);
  // 2. Which of rank 0's fields this rank disagrees on, one bit each (< 2^53: exact in a
  // double), summed so every rank learns every rank's answer.
  std::uint64_t mask = 0;
  for (std::size_t i = 0; i < root.size() && i < 52; ++i) {
    const bool same = i < mine.fields.size() && mine.fields[i].name == root[i].first &&
                      hex64(mine.fields[i].hash) == root[i].second;
    if (!same) mask |= std::uint64_t{1} << i;
  }
  if (root.size() != mine.fields.size() && root.size() > 0)  // another build's field list
    mask |= std::uint64_t{1} << (root.size() - 1);
  std::vector<double> masks(static_cast<std::size_t>(n), 0.0);
  masks[static_cast<std::size_t>(me)] = static_cast<double>(mask);
  comm.all_reduce_host(masks.data(), n, ReduceOp::Sum);
  bool any = false;
  for (double m : masks) any = any || m != 0;
  if (!any) return;
  // 3. For each differing field, rank 0's value and the first differing rank's value: the
  // same broadcasts on every rank, in field order.
  std::string message =
      "the ranks of this job disagree on what they run (compared before the first step; every "
      "rank must be started with the same scenario, job, plan, --steps, --seed, precision and "
      "checkpoint flags and the same Cephalo build):";
  int first_rank = n;
  for (std::size_t i = 0; i < root.size() && i < 52; ++i) {
    std::vector<int> ranks;
    for (int r = 0; r < n; ++r)
      if (static_cast<std::uint64_t>(masks[static_cast<std::size_t>(r)]) >> i & 1u)
        ranks.push_back(r);
    if (ranks.empty()) continue;
    first_rank = std::min(first_rank, ranks.front());
    std::string ours = me == 0 && i < mine.fields.size() ? mine.fields[i].shown : "";
    comm.broadcast_host(ours, 0);
    std::string theirs;
    if (me == ranks.front())
      theirs = i < mine.fields.size() ? mine.fields[i].shown : "(a build without this field)";
    comm.broadcast_host(theirs, ranks.front());
    message += "\n  " + root[i].first + " differs on rank" + (ranks.size() == 1 ? " " : "s ") +
               rank_list(ranks) + ": rank 0 has " + ours + "; rank " +
               std::to_string(ranks.front()) + " has " + theirs;
  }
  throw AgreedFailure(ErrorKind::Runtime, first_rank, message);
}

}  // namespace cephalo::backend
