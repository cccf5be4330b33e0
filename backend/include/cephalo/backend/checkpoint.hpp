#pragma once
// The sharded checkpoint format (DESIGN §7): one folder per saved step,
//   D/step_XXXXXXXX/rank_RRRRR.bin   every rank's owned slice of params, Adam m, v per unit
//   D/step_XXXXXXXX/manifest.json    written last by rank 0: what the shards hold
//   D/latest                         the step folder to resume from, written after the manifest
// Each shard's size and xxHash64 are in the manifest and are verified before a byte of it is
// used; the manifest is validated completely (offsets start at 0, never decrease, end at the
// unit size; one shard per rank, of exactly the bytes its slices imply) before any shard is
// opened. The manifest also names the run that wrote it (model, plan hash, data seed, step) so
// a fresh run never mistakes another run's folder for its own.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cephalo/core/plan.hpp"

namespace cephalo::backend {

inline constexpr const char* kCheckpointFormat = "cephalo-checkpoint";
// 1: no checksums, no run identity (refused: it cannot be verified). 2: this format.
inline constexpr int kCheckpointVersion = 2;

// Who wrote a checkpoint. The plan may change on resume (another rank count or shares), so its
// hash is provenance; the model and the data seed must match the run that resumes.
struct RunIdentity {
  std::string model;      // the job's model name
  std::string plan_hash;  // traces::plan_hash of the plan that wrote the checkpoint
  std::uint64_t data_seed = 0;
};

// The model shape the shards were cut from.
struct CheckpointModel {
  int layers = 0, hidden = 0, heads = 0, ffn = 0, vocab = 0;
  int positions = 0;  // rows of the position table
  int seq = 0;        // sequence length of the run that wrote it (informational)
  bool tied_head = true;
};

struct ShardEntry {
  std::string file;         // rank_RRRRR.bin, relative to the step folder
  std::int64_t bytes = 0;   // exactly 3 x 4 x (elements this rank owned over all units)
  std::uint64_t xxh64 = 0;  // XXH64 (seed 0) of the whole file
};

struct CheckpointManifest {
  RunIdentity run;
  int step = 0;  // steps completed: the resumed run starts at this step
  std::int64_t adam_step = 0;
  double loss_scale = 1.0;  // fp16 dynamic loss scaler state
  int loss_scale_clean_steps = 0;
  CheckpointModel model;
  std::vector<std::int64_t> unit_numel;            // per unit
  std::vector<std::vector<std::int64_t>> offsets;  // per unit: ranks + 1 slice bounds
  std::vector<ShardEntry> shards;                  // per rank of the writing run

  int ranks() const { return static_cast<int>(shards.size()); }
  std::int64_t owned(int unit, int rank) const;
  // Byte offset in rank r's shard of unit u's array k (0 params, 1 Adam m, 2 Adam v).
  std::int64_t shard_offset(int rank, int unit, int k) const;
  std::int64_t shard_bytes(int rank) const;  // what the offsets imply
};

// Parses and validates a manifest completely without opening any other file: every field's
// type and range, offsets starting at 0, non-decreasing, ending at the unit size, one shard per
// rank named as the format names it with the byte size its slices imply. ValidationError naming
// `file`, the JSON path, the value and what was expected. (The checkpoint-manifest fuzz target.)
CheckpointManifest parse_checkpoint_manifest(std::string_view text, const std::string& file);
std::string render_checkpoint_manifest(const CheckpointManifest& manifest);

// XXH64 (seed 0) of a shard's bytes, and its 16-hex-digit spelling in the manifest.
std::uint64_t shard_checksum(std::string_view bytes);
std::string checksum_hex(std::uint64_t value);

std::string step_dir_name(int step);   // step_XXXXXXXX
std::string rank_file_name(int rank);  // rank_RRRRR.bin

// The checkpoint D/latest names, its manifest parsed and validated.
struct LatestCheckpoint {
  std::filesystem::path step_dir;
  std::filesystem::path manifest_file;
  CheckpointManifest manifest;
};
// IoError when D/latest or the manifest cannot be read; ValidationError for a bad manifest or a
// `latest` that does not name a step folder of this format.
LatestCheckpoint read_latest_checkpoint(const std::filesystem::path& dir);

// The manifest against the run resuming from it: model shape, unit sizes, data seed.
// ValidationError naming the manifest, the JSON path, the value and what this run has.
void check_checkpoint_fits(const LatestCheckpoint& ckpt, const RunIdentity& run,
                           const CheckpointModel& model,
                           const std::vector<std::int64_t>& unit_numel);

// Rank `rank`'s shard of the checkpoint, read whole and verified (size and checksum) before it
// is returned. ValidationError naming the shard file for a corrupt or truncated shard.
std::string read_verified_shard(const LatestCheckpoint& ckpt, int rank);

// True when `dir` holds a checkpoint of this format (a `latest` or a step_XXXXXXXX folder).
bool holds_checkpoints(const std::filesystem::path& dir);
// Checks, before training, that checkpoints can be written to `dir`: it is a folder or can be
// created (it is created). A folder holding checkpoints is refused (ValidationError) unless it
// is the folder this run resumes from or `overwrite` is set; then `remove_stale` decides.
// Non-collective: every rank runs it and the caller agrees on the outcome.
void check_checkpoint_dir(const std::filesystem::path& dir, const std::filesystem::path& resume,
                          bool overwrite);
// Removes every checkpoint of this format from `dir` (`latest` and step_XXXXXXXX folders, and
// nothing else), so a new run's manifest never sits beside another run's shards.
void remove_checkpoints(const std::filesystem::path& dir);

}  // namespace cephalo::backend
