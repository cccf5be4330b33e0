#pragma once
// The identity of a run: one hash over everything the ranks of one job must agree on before
// they train together — the scenario (its name and cluster), the job (model, sequence, batch,
// precision, optimizer), the plan, the steps, the data seed, the precision flags, the
// checkpoint settings and the binary's version. Each is hashed on its own (a field), so that a
// disagreement names the field and the ranks, not only "something differs".
//
// Ranks that start from different plan files, step counts, seeds or job files under one
// scenario name would otherwise meet in collectives of different sizes (heap corruption), wait
// forever (one more step) or train silently apart (other losses). agree_run_identity runs
// before the first collective whose size depends on the inputs; the identity is written into
// every checkpoint (manifest and shard headers) and every RunResult.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cephalo/backend/communicator.hpp"
#include "cephalo/core/plan.hpp"
#include "cephalo/core/scenario.hpp"

namespace cephalo::backend {

// The command-line settings of `cephalo run` that change what is computed or written.
struct RunSettings {
  int steps = 0;
  std::uint64_t data_seed = 0;
  std::string device;     // cpu | cuda
  double loss_scale = 0;  // initial dynamic loss scale (fp16)
  std::string report;     // median | min | last
  std::filesystem::path checkpoint_dir;
  int checkpoint_every = 0;
  bool overwrite_checkpoints = false;
  std::filesystem::path resume;
  // Whether the full parameters / gradients are gathered after training (collective: a rank
  // that gathers while another does not would wait forever).
  bool dump_params = false;
  bool dump_grads = false;
};

struct RunIdentityField {
  std::string name;  // scenario, job, plan, steps, seed, precision, checkpoint, dumps, binary
  std::uint64_t hash = 0;
  std::string shown;  // a short human form for messages ("4", "plan 1f2e... (p.json)")
};

class RunFingerprint {
 public:
  std::vector<RunIdentityField> fields;
  // XXH64 over the fields' hashes in order: the run identity.
  std::uint64_t hash() const;
  std::string hex() const;  // 16 lowercase hex digits
};

// The version of this binary as the identity records it (project version and checkpoint
// format), so ranks started from different builds of Cephalo are told apart.
std::string binary_version();

RunFingerprint make_run_fingerprint(const Scenario& scenario, const Plan& plan,
                                    const std::string& plan_file, const RunSettings& settings);

// Collective over every rank of `comm`, from the host thread before any other collective of
// the run: rank 0 broadcasts its fields' hashes, every rank compares them with its own, and the
// ranks exchange which fields differ. On a mismatch every rank throws AgreedFailure (Runtime,
// exit 4) with one message naming each differing field, rank 0's value, the ranks that differ
// and the first of them's value. A constant number of collectives: all ranks return or throw
// together, within the time of a few small messages.
void agree_run_identity(Communicator& comm, const RunFingerprint& mine);

}  // namespace cephalo::backend
