#include "cephalo/backend/checkpoint.hpp"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <tuple>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/output_file.hpp"

namespace cephalo::backend {

namespace fs = std::filesystem;

namespace {

// Bounds that keep every product below 2^62 (12 bytes x elements x units).
constexpr std::int64_t kMaxRanks = 1 << 20;
constexpr std::int64_t kMaxNumel = std::int64_t{1} << 40;
constexpr std::int64_t kMaxLayers = 1 << 16;

// `latest` is read with record_input = false: it is a pointer that a run resuming into its own
// folder is meant to advance, unlike manifests and shards, which no output may replace.
std::string read_whole(const fs::path& file, const char* what, bool record_input = true) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw IoError("cannot read " + std::string(what) + " " + file.string() +
                  (fs::exists(file, ec) ? ": not a regular file" : ": no such file"));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError("cannot read " + std::string(what) + " " + file.string());
  if (record_input) note_input_file(file);  // no output may overwrite it (output_file.hpp)
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_step_dir_name(const std::string& name) {
  return name.size() == 13 && name.starts_with("step_") &&
         name.find_first_not_of("0123456789", 5) == std::string::npos;
}

std::uint64_t parse_hex64(JsonReader r) {
  const std::string s = r.as_string();
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
    r.fail_value("\"" + s.substr(0, 40) + "\"", "16 lowercase hex digits (XXH64 of the shard)");
  return std::stoull(s, nullptr, 16);
}

int small_int(JsonReader& r, const char* key, std::int64_t min, std::int64_t max) {
  return static_cast<int>(r.integer(key, min, max));
}

}  // namespace

std::int64_t CheckpointManifest::owned(int unit, int rank) const {
  const auto& o = offsets[static_cast<std::size_t>(unit)];
  return o[static_cast<std::size_t>(rank) + 1] - o[static_cast<std::size_t>(rank)];
}

std::int64_t CheckpointManifest::shard_offset(int rank, int unit, int k) const {
  std::int64_t elements = 0;
  for (int u = 0; u < unit; ++u) elements += 3 * owned(u, rank);
  return (elements + k * owned(unit, rank)) * 4;
}

std::int64_t CheckpointManifest::shard_bytes(int rank) const {
  std::int64_t elements = 0;
  for (int u = 0; u < static_cast<int>(offsets.size()); ++u) elements += 3 * owned(u, rank);
  return elements * 4;
}

std::uint64_t shard_checksum(std::string_view bytes) {
  return XXH64(bytes.data(), bytes.size(), 0);
}

std::string checksum_hex(std::uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

std::string step_dir_name(int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08d", step);
  return buf;
}

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.bin", rank);
  return buf;
}

CheckpointManifest parse_checkpoint_manifest(std::string_view text, const std::string& file) {
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    throw ValidationError(file, "$",
                          "malformed JSON (" + std::string(e.what()).substr(0, 200) + ")",
                          "a cephalo checkpoint manifest");
  }
  JsonReader r(j, file);
  if (!r.is_object()) r.fail("an object (a cephalo checkpoint manifest)");
  if (r.string("format") != kCheckpointFormat)
    r.child("format").fail(std::string("\"") + kCheckpointFormat + "\"");
  const auto version = r.child("version").as_integer();
  if (version != kCheckpointVersion)
    r.child("version").fail_value(
        std::to_string(version),
        std::to_string(kCheckpointVersion) +
            (version == 1 ? " (version 1 has no shard checksums and cannot be verified; "
                            "start a fresh run)"
                          : ""));
  CheckpointManifest m;
  {
    auto run = r.child("run");
    if (!run.is_object()) run.fail("an object naming the run (model, plan_hash, data_seed)");
    m.run.model = run.string("model");
    m.run.plan_hash = run.string("plan_hash");
    auto seed = run.child("data_seed");
    if (!seed.value().is_number_unsigned()) seed.fail("an unsigned 64-bit integer");
    m.run.data_seed = seed.value().get<std::uint64_t>();
    run.finish();
  }
  m.step = small_int(r, "step", 0, INT32_MAX);
  m.adam_step = r.integer("adam_step", 0, m.step);
  m.loss_scale = r.number("loss_scale");
  if (!(m.loss_scale > 0) || !std::isfinite(m.loss_scale))
    r.child("loss_scale").fail("a positive finite loss scale");
  m.loss_scale_clean_steps = small_int(r, "loss_scale_clean_steps", 0, INT32_MAX);
  const int ranks = small_int(r, "ranks", 1, kMaxRanks);
  {
    auto model = r.child("model");
    if (!model.is_object()) model.fail("an object (the model shape)");
    m.model.layers = small_int(model, "layers", 1, kMaxLayers);
    m.model.hidden = small_int(model, "hidden", 1, INT32_MAX);
    m.model.heads = small_int(model, "heads", 1, INT32_MAX);
    m.model.ffn = small_int(model, "ffn", 1, INT32_MAX);
    m.model.vocab = small_int(model, "vocab", 1, INT32_MAX);
    m.model.positions = small_int(model, "positions", 1, INT32_MAX);
    m.model.seq = small_int(model, "seq", 1, INT32_MAX);
    m.model.tied_head = model.child("tied_head").as_bool();
    model.finish();
  }
  auto units = r.child("units");
  // Embedding, layers, head.
  const std::size_t want_units = static_cast<std::size_t>(m.model.layers) + 2;
  if (!units.is_array() || units.size() != want_units)
    units.fail(std::to_string(want_units) + " units (embedding, " + std::to_string(m.model.layers) +
               " layers, head)");
  for (std::size_t u = 0; u < want_units; ++u) {
    auto ur = units.element(u);
    if (!ur.is_object()) ur.fail("an object with numel and offsets");
    const std::int64_t numel = ur.integer("numel", 1, kMaxNumel);
    auto offs = ur.child("offsets");
    if (!offs.is_array() || offs.size() != static_cast<std::size_t>(ranks) + 1)
      offs.fail(std::to_string(ranks + 1) + " shard offsets (ranks + 1)");
    std::vector<std::int64_t> o;
    for (std::size_t i = 0; i < offs.size(); ++i) {
      auto x = offs.element(i);
      if (!x.value().is_number_integer()) x.fail("an integer element offset");
      const std::int64_t got = x.value().get<std::int64_t>();
      const bool last = i + 1 == offs.size();
      if (i == 0 && got != 0) x.fail_value(std::to_string(got), "0 (the unit's first element)");
      if (i > 0 && got < o.back())
        x.fail_value(std::to_string(got), "at least " + std::to_string(o.back()) +
                                              ", the previous offset (offsets never decrease)");
      if (last && got != numel)
        x.fail_value(std::to_string(got), "the unit size " + std::to_string(numel) + " (numel)");
      if (got > numel)
        x.fail_value(std::to_string(got), "at most the unit size " + std::to_string(numel));
      o.push_back(got);
    }
    m.unit_numel.push_back(numel);
    m.offsets.push_back(std::move(o));
    ur.finish();
  }
  auto shards = r.child("shards");
  if (!shards.is_array() || shards.size() != static_cast<std::size_t>(ranks))
    shards.fail(std::to_string(ranks) + " shards (one per rank)");
  m.shards.resize(static_cast<std::size_t>(ranks));
  for (int k = 0; k < ranks; ++k) {
    auto sr = shards.element(static_cast<std::size_t>(k));
    if (!sr.is_object()) sr.fail("an object with file, bytes and xxh64");
    auto& s = m.shards[static_cast<std::size_t>(k)];
    s.file = sr.string("file");
    if (s.file != rank_file_name(k)) sr.child("file").fail("\"" + rank_file_name(k) + "\"");
    s.bytes = sr.integer("bytes", 0);
    if (s.bytes != m.shard_bytes(k))
      sr.child("bytes").fail_value(std::to_string(s.bytes),
                                   std::to_string(m.shard_bytes(k)) +
                                       " (params, m and v of the slices the offsets give rank " +
                                       std::to_string(k) + ")");
    s.xxh64 = parse_hex64(sr.child("xxh64"));
    sr.finish();
  }
  r.finish();
  return m;
}

std::string render_checkpoint_manifest(const CheckpointManifest& m) {
  Json units = Json::array();
  for (std::size_t u = 0; u < m.offsets.size(); ++u)
    units.push_back({{"numel", m.unit_numel[u]}, {"offsets", m.offsets[u]}});
  Json shards = Json::array();
  for (const auto& s : m.shards)
    shards.push_back({{"file", s.file}, {"bytes", s.bytes}, {"xxh64", checksum_hex(s.xxh64)}});
  const auto& c = m.model;
  Json j = {
      {"format", kCheckpointFormat},
      {"version", kCheckpointVersion},
      {"run",
       {{"model", m.run.model}, {"plan_hash", m.run.plan_hash}, {"data_seed", m.run.data_seed}}},
      {"step", m.step},
      {"adam_step", m.adam_step},
      {"loss_scale", m.loss_scale},
      {"loss_scale_clean_steps", m.loss_scale_clean_steps},
      {"ranks", m.ranks()},
      {"model",
       {{"layers", c.layers},
        {"hidden", c.hidden},
        {"heads", c.heads},
        {"ffn", c.ffn},
        {"vocab", c.vocab},
        {"positions", c.positions},
        {"seq", c.seq},
        {"tied_head", c.tied_head}}},
      {"units", units},
      {"shards", shards}};
  return j.dump(2) + "\n";
}

LatestCheckpoint read_latest_checkpoint(const fs::path& dir) {
  const auto latest_file = dir / "latest";
  std::string latest = read_whole(latest_file, "checkpoint pointer", /*record_input=*/false);
  while (!latest.empty() && std::isspace(static_cast<unsigned char>(latest.back())))
    latest.pop_back();
  if (!is_step_dir_name(latest))
    throw ValidationError(latest_file.string(), "", "\"" + latest.substr(0, 60) + "\"",
                          "the name of a step folder, step_XXXXXXXX");
  LatestCheckpoint c;
  c.step_dir = dir / latest;
  c.manifest_file = c.step_dir / "manifest.json";
  c.manifest = parse_checkpoint_manifest(read_whole(c.manifest_file, "checkpoint manifest"),
                                         c.manifest_file.string());
  if (step_dir_name(c.manifest.step) != latest)
    throw ValidationError(c.manifest_file.string(), "step", std::to_string(c.manifest.step),
                          "the step of its folder " + latest);
  return c;
}

void check_checkpoint_fits(const LatestCheckpoint& ckpt, const RunIdentity& run,
                           const CheckpointModel& model,
                           const std::vector<std::int64_t>& unit_numel) {
  const auto& m = ckpt.manifest;
  const std::string file = ckpt.manifest_file.string();
  const std::string ours = " (the model of the run being resumed)";
  for (auto [key, got, want] : std::initializer_list<std::tuple<const char*, int, int>>{
           {"layers", m.model.layers, model.layers},
           {"hidden", m.model.hidden, model.hidden},
           {"heads", m.model.heads, model.heads},
           {"ffn", m.model.ffn, model.ffn},
           {"vocab", m.model.vocab, model.vocab},
           {"positions", m.model.positions, model.positions}})
    if (got != want)
      throw ValidationError(file, std::string("model.") + key, std::to_string(got),
                            std::to_string(want) + ours);
  if (m.model.tied_head != model.tied_head)
    throw ValidationError(file, "model.tied_head", m.model.tied_head ? "true" : "false",
                          std::string(model.tied_head ? "true" : "false") + ours);
  for (std::size_t u = 0; u < unit_numel.size() && u < m.unit_numel.size(); ++u)
    if (m.unit_numel[u] != unit_numel[u])
      throw ValidationError(file, "units[" + std::to_string(u) + "].numel",
                            std::to_string(m.unit_numel[u]), std::to_string(unit_numel[u]) + ours);
  // The data stream is a function of the seed: resuming with another would silently train on
  // another sequence of batches than the run being continued.
  if (m.run.data_seed != run.data_seed)
    throw ValidationError(file, "run.data_seed", std::to_string(m.run.data_seed),
                          std::to_string(run.data_seed) +
                              " (this run's --seed; resume with --seed " +
                              std::to_string(m.run.data_seed) + ")");
}

std::string read_verified_shard(const LatestCheckpoint& ckpt, int rank) {
  const auto& entry = ckpt.manifest.shards.at(static_cast<std::size_t>(rank));
  const auto file = ckpt.step_dir / entry.file;
  std::string bytes = read_whole(file, "checkpoint shard");
  const std::string where = "shards[" + std::to_string(rank) + "]";
  if (static_cast<std::int64_t>(bytes.size()) != entry.bytes)
    throw ValidationError(file.string(), "", std::to_string(bytes.size()) + " bytes",
                          std::to_string(entry.bytes) + " bytes as " + ckpt.manifest_file.string() +
                              " records at " + where + ".bytes (a truncated or foreign shard)");
  const std::uint64_t sum = shard_checksum(bytes);
  if (sum != entry.xxh64)
    throw ValidationError(file.string(), "", "XXH64 " + checksum_hex(sum),
                          "XXH64 " + checksum_hex(entry.xxh64) + " as " +
                              ckpt.manifest_file.string() + " records at " + where +
                              ".xxh64 (the shard is corrupt; nothing of it was used)");
  return bytes;
}

bool holds_checkpoints(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  if (fs::exists(dir / "latest", ec)) return true;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (is_step_dir_name(e.path().filename().string())) return true;
  return false;
}

namespace {

// What the folder holds, for the refusal message.
std::string describe_checkpoints(const fs::path& dir) {
  try {
    auto c = read_latest_checkpoint(dir);
    return "checkpoints of a run of " + c.manifest.run.model + " (plan " +
           c.manifest.run.plan_hash + ", seed " + std::to_string(c.manifest.run.data_seed) +
           ", latest step " + std::to_string(c.manifest.step) + ")";
  } catch (const std::exception&) {
    return "checkpoints (step_XXXXXXXX folders or a latest pointer)";
  }
}

}  // namespace

void check_checkpoint_dir(const fs::path& dir, const fs::path& resume, bool overwrite) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw IoError("--checkpoint-dir " + dir.string() + " exists and is not a folder");
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec && !fs::is_directory(dir))
      throw IoError("cannot create checkpoint folder " + dir.string() + ": " + ec.message());
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw IoError("checkpoint folder " + dir.string() + " is not writable");
  if (overwrite || !holds_checkpoints(dir)) return;
  if (!resume.empty() && fs::equivalent(dir, resume, ec)) return;
  throw ValidationError(dir.string(), "", describe_checkpoints(dir),
                        "an empty folder for a fresh run; --resume " + dir.string() +
                            " to continue that run, or --overwrite-checkpoints to replace them");
}

void remove_checkpoints(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::vector<fs::path> doomed;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename() == "latest" || is_step_dir_name(e.path().filename().string()))
      doomed.push_back(e.path());
  // `latest` first: a folder interrupted halfway never points at a half-removed step.
  std::sort(doomed.begin(), doomed.end(), [](const fs::path& a, const fs::path& b) {
    return a.filename() == "latest" && b.filename() != "latest";
  });
  for (const auto& p : doomed) {
    fs::remove_all(p, ec);
    if (ec) throw IoError("cannot remove old checkpoint " + p.string() + ": " + ec.message());
  }
}

}  // namespace cephalo::backend
