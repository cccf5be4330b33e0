#pragma once
// The sharded checkpoint format (DESIGN §7): one folder per saved step,
//   D/step_XXXXXXXX/rank_RRRRR.bin   every rank's owned slice of params, Adam m, v per unit
//   D/step_XXXXXXXX/manifest.json    written last by rank 0: what the shards hold
//   D/latest                         the step folder to resume from, written after the manifest
// Each shard starts with a header naming its rank, its slice of every unit (offset, count), the
// plan hash and the run identity (run_identity.hpp); its size and xxHash64 are in the manifest;
// all are verified before a byte of it is used, so a swapped, foreign or mis-sized shard is
// refused with its path; the manifest is validated completely (offsets start at 0, never decrease,
// end at the unit size; one shard per rank, of exactly the bytes its slices imply) before any shard
// is opened. The manifest also names the run that wrote it (model, plan hash, data seed, step) so
// a fresh run never mistakes another run's folder for its own.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cephalo/core/plan.hpp"

namespace cephalo::backend {

inline constexpr const char* kCheckpointFormat = "cephalo-checkpoint";
// 1: no checksums, no run identity; 2: shards without headers (both refused: they cannot be
// verified). 3: this format.
inline constexpr int kCheckpointVersion = 3;
// The lock file of a checkpoint folder (CheckpointLock), and the magic of a shard header.
inline constexpr const char* kCheckpointLockName = "cephalo.lock";
inline constexpr char kShardMagic[8] = {'C', 'E', 'P', 'H', 'S', 'H', 'R', 'D'};

// Who wrote a checkpoint. The plan may change on resume (another rank count or shares), so its
// hash is provenance; the model and the data seed must match the run that resumes.
struct RunIdentity {
  std::string model;      // the job's model name
  std::string plan_hash;  // traces::plan_hash of the plan that wrote the checkpoint
  std::uint64_t data_seed = 0;
  std::string run_identity;  // RunFingerprint::hex() of the run that wrote it (16 hex digits)
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
  std::int64_t shard_bytes(int rank) const;  // what the offsets imply, header included
  std::int64_t shard_header_bytes() const;   // 56 + 16 per unit
};

// The header every shard starts with (little-endian fixed-width fields): "CEPHSHRD", header
// version 1, rank, ranks, units, plan hash and run identity (16 hex digits each), then
// (offset, count) in elements for every unit: the slice of the unit the shard holds.
struct ShardHeader {
  int rank = 0;
  int ranks = 0;
  std::string plan_hash;
  std::string run_identity;
  std::vector<std::pair<std::int64_t, std::int64_t>> slices;  // per unit: offset, count
};
// Rank `rank`'s header as `manifest` describes the checkpoint.
std::string render_shard_header(const CheckpointManifest& manifest, int rank);
// Reads the header at the start of `bytes` (a shard read from `file`): ValidationError naming
// the file and the field for a short, foreign or malformed header. (A fuzz target.)
ShardHeader parse_shard_header(std::string_view bytes, const std::string& file);
// The header of the shard that `manifest` lists at `rank` must be that rank's: its rank, slices,
// plan hash and run identity as the manifest records them. ValidationError naming `file`.
void check_shard_header(const ShardHeader& header, const CheckpointManifest& manifest, int rank,
                        const std::string& file, const std::string& manifest_file);

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
// With `lock` (rank 0 of the run), the folder's CheckpointLock is taken into it once the folder
// exists, before its contents are judged: a folder another run is writing is refused as such.
// Non-collective: every rank runs it and the caller agrees on the outcome.
class CheckpointLock;
void check_checkpoint_dir(const std::filesystem::path& dir, const std::filesystem::path& resume,
                          bool overwrite, CheckpointLock* lock = nullptr);
// A checkpoint folder belongs to one run at a time: an exclusive flock on D/cephalo.lock, held
// from before the first checkpoint is checked until the run ends (the descriptor is closed by
// the destructor or by the kernel when the process dies, so a killed run never leaves a stale
// lock). The holder writes "pid P host H" into the file; a second run is refused at start
// (IoError) naming them. Rank 0 of a job takes it: the other ranks write into the same folder
// for the same run.
class CheckpointLock {
 public:
  CheckpointLock() = default;
  explicit CheckpointLock(const std::filesystem::path& dir);
  ~CheckpointLock();
  CheckpointLock(CheckpointLock&& other) noexcept;
  CheckpointLock& operator=(CheckpointLock&& other) noexcept;
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Every name this format owns in `dir`: `latest`, the lock file and step_XXXXXXXX folders
// (anything inside them). An output of the command (--result, --trace) that is or would be
// one of them, under any spelling (symlinks and `..` resolved), or that is a hard link to an
// existing file in them, is refused at start (IoError naming the flag, the file and the
// checkpoint folder): a result written over `latest` or a shard would make the folder
// unresumable or resume into the wrong bytes.
void check_outputs_outside_checkpoints(
    const std::vector<std::pair<std::string, std::filesystem::path>>& outputs,
    const std::vector<std::filesystem::path>& checkpoint_dirs);

// Removes every checkpoint of this format from `dir` (`latest` and step_XXXXXXXX folders, and
// nothing else), so a new run's manifest never sits beside another run's shards.
void remove_checkpoints(const std::filesystem::path& dir);

}  // namespace cephalo::backend
