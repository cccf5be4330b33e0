#include "cephalo/backend/checkpoint.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
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

std::int64_t CheckpointManifest::shard_header_bytes() const {
  return 56 + 16 * static_cast<std::int64_t>(offsets.size());
}

std::int64_t CheckpointManifest::shard_offset(int rank, int unit, int k) const {
  std::int64_t elements = 0;
  for (int u = 0; u < unit; ++u) elements += 3 * owned(u, rank);
  return shard_header_bytes() + (elements + k * owned(unit, rank)) * 4;
}

std::int64_t CheckpointManifest::shard_bytes(int rank) const {
  std::int64_t elements = 0;
  for (int u = 0; u < static_cast<int>(offsets.size()); ++u) elements += 3 * owned(u, rank);
  return shard_header_bytes() + elements * 4;
}

namespace {

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i) & 0xff));
}
void put_i64(std::string& out, std::int64_t v) {
  const auto u = static_cast<std::uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(u >> (8 * i) & 0xff));
}
// 16 bytes: the hex digits, or zeros when the run recorded none.
void put_hex16(std::string& out, const std::string& hex) {
  std::string h = hex.substr(0, 16);
  h.resize(16, '\0');
  out += h;
}

// Reads fixed-width fields from a shard header, refusing a short one by name.
class HeaderReader {
 public:
  HeaderReader(std::string_view bytes, const std::string& file) : b_(bytes), file_(file) {}
  std::string_view take(std::size_t n, const char* field) {
    if (b_.size() - pos_ < n)
      throw ValidationError(
          file_, std::string("header.") + field, std::to_string(b_.size()) + " bytes in the file",
          std::string("a cephalo checkpoint shard (its header ends before ") + field + ")");
    auto out = b_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  std::uint32_t u32(const char* field) {
    auto s = take(4, field);
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
      v |= static_cast<std::uint32_t>(static_cast<unsigned char>(s[i])) << (8 * i);
    return v;
  }
  std::int64_t i64(const char* field) {
    auto s = take(8, field);
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
    return static_cast<std::int64_t>(v);
  }
  std::string hex16(const char* field) {
    std::string s(take(16, field));
    if (s == std::string(16, '\0')) return "";
    if (s.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw ValidationError(file_, std::string("header.") + field, "bytes that are not hex digits",
                            "16 lowercase hex digits");
    return s;
  }
  [[noreturn]] void fail(const std::string& field, const std::string& value,
                         const std::string& expected) const {
    throw ValidationError(file_, "header." + field, value, expected);
  }

 private:
  std::string_view b_;
  std::size_t pos_ = 0;
  const std::string& file_;
};

}  // namespace

std::string render_shard_header(const CheckpointManifest& m, int rank) {
  std::string out(kShardMagic, sizeof kShardMagic);
  put_u32(out, 1);
  put_u32(out, static_cast<std::uint32_t>(rank));
  // The rank count from the offsets: the header is rendered before the shards are listed.
  put_u32(out, static_cast<std::uint32_t>(m.offsets.front().size() - 1));
  put_u32(out, static_cast<std::uint32_t>(m.offsets.size()));
  put_hex16(out, m.run.plan_hash);
  put_hex16(out, m.run.run_identity);
  for (std::size_t u = 0; u < m.offsets.size(); ++u) {
    put_i64(out, m.offsets[u][static_cast<std::size_t>(rank)]);
    put_i64(out, m.owned(static_cast<int>(u), rank));
  }
  return out;
}

ShardHeader parse_shard_header(std::string_view bytes, const std::string& file) {
  HeaderReader in(bytes, file);
  if (in.take(sizeof kShardMagic, "magic") != std::string_view(kShardMagic, sizeof kShardMagic))
    in.fail("magic", "other bytes", "\"CEPHSHRD\" (a cephalo checkpoint shard)");
  if (const auto v = in.u32("version"); v != 1)
    in.fail("version", std::to_string(v), "1 (the shard header this build reads)");
  ShardHeader h;
  const std::uint32_t rank = in.u32("rank"), ranks = in.u32("ranks"), units = in.u32("units");
  if (ranks < 1 || ranks > static_cast<std::uint32_t>(kMaxRanks) || rank >= ranks)
    in.fail("rank", std::to_string(rank) + " of " + std::to_string(ranks),
            "a rank below its rank count (at most " + std::to_string(kMaxRanks) + ")");
  if (units < 3 || units > static_cast<std::uint32_t>(kMaxLayers) + 2)
    in.fail("units", std::to_string(units), "3 to " + std::to_string(kMaxLayers + 2) + " units");
  h.rank = static_cast<int>(rank);
  h.ranks = static_cast<int>(ranks);
  h.plan_hash = in.hex16("plan_hash");
  h.run_identity = in.hex16("run_identity");
  for (std::uint32_t u = 0; u < units; ++u) {
    const std::int64_t offset = in.i64("slices"), count = in.i64("slices");
    if (offset < 0 || count < 0 || offset > kMaxNumel || count > kMaxNumel - offset)
      in.fail("slices[" + std::to_string(u) + "]",
              "offset " + std::to_string(offset) + ", count " + std::to_string(count),
              "a slice within a unit of at most " + std::to_string(kMaxNumel) + " elements");
    h.slices.emplace_back(offset, count);
  }
  return h;
}

void check_shard_header(const ShardHeader& h, const CheckpointManifest& m, int rank,
                        const std::string& file, const std::string& manifest_file) {
  const std::string as = " as " + manifest_file + " records it";
  auto refuse = [&](const std::string& field, const std::string& got, const std::string& want) {
    throw ValidationError(file, "header." + field, got,
                          want + as + " (a swapped or foreign shard; nothing of it was used)");
  };
  if (h.rank != rank) refuse("rank", std::to_string(h.rank), "rank " + std::to_string(rank));
  if (h.ranks != m.ranks())
    refuse("ranks", std::to_string(h.ranks), std::to_string(m.ranks()) + " ranks");
  if (h.plan_hash != m.run.plan_hash)
    refuse("plan_hash", "\"" + h.plan_hash + "\"", "\"" + m.run.plan_hash + "\"");
  if (h.run_identity != m.run.run_identity)
    refuse("run_identity", "\"" + h.run_identity + "\"", "\"" + m.run.run_identity + "\"");
  if (h.slices.size() != m.offsets.size())
    refuse("units", std::to_string(h.slices.size()), std::to_string(m.offsets.size()) + " units");
  for (std::size_t u = 0; u < h.slices.size(); ++u) {
    const std::int64_t offset = m.offsets[u][static_cast<std::size_t>(rank)];
    const std::int64_t count = m.owned(static_cast<int>(u), rank);
    if (h.slices[u].first != offset || h.slices[u].second != count)
      refuse("slices[" + std::to_string(u) + "]",
             "offset " + std::to_string(h.slices[u].first) + ", count " +
                 std::to_string(h.slices[u].second),
             "offset " + std::to_string(offset) + ", count " + std::to_string(count));
  }
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
            (version == 1 || version == 2
                 ? " (version " + std::to_string(version) +
                       (version == 1 ? " has no shard checksums"
                                     : " has shards without a header naming their rank") +
                       " and cannot be verified; start a fresh run)"
                 : std::string()));
  CheckpointManifest m;
  {
    auto run = r.child("run");
    if (!run.is_object()) run.fail("an object naming the run (model, plan_hash, data_seed)");
    m.run.model = run.string("model");
    m.run.plan_hash = run.string("plan_hash");
    if (m.run.plan_hash.size() != 16 ||
        m.run.plan_hash.find_first_not_of("0123456789abcdef") != std::string::npos)
      run.child("plan_hash").fail("16 lowercase hex digits (the plan hash)");
    auto seed = run.child("data_seed");
    if (!seed.value().is_number_unsigned()) seed.fail("an unsigned 64-bit integer");
    m.run.data_seed = seed.value().get<std::uint64_t>();
    auto identity = run.child("run_identity");
    m.run.run_identity = identity.as_string();
    if (m.run.run_identity.size() != 16 ||
        m.run.run_identity.find_first_not_of("0123456789abcdef") != std::string::npos)
      identity.fail("16 lowercase hex digits (the run identity)");
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
  Json j = {{"format", kCheckpointFormat},
            {"version", kCheckpointVersion},
            {"run",
             {{"model", m.run.model},
              {"plan_hash", m.run.plan_hash},
              {"data_seed", m.run.data_seed},
              {"run_identity", m.run.run_identity}}},
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
  // A shard of the right size and checksum may still be another rank's (shards swapped with
  // their checksums) or another run's: its header says whose it is.
  check_shard_header(parse_shard_header(bytes, file.string()), ckpt.manifest, rank, file.string(),
                     ckpt.manifest_file.string());
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

void check_checkpoint_dir(const fs::path& dir, const fs::path& resume, bool overwrite,
                          CheckpointLock* lock) {
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
  if (lock) *lock = CheckpointLock(dir);
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

CheckpointLock::CheckpointLock(const fs::path& dir) {
  const fs::path file = dir / kCheckpointLockName;
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0)
    throw IoError("--checkpoint-dir " + dir.string() + ": cannot open its lock file " +
                  file.string() + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    char buf[512];
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    if (n > 0) holder.assign(buf, static_cast<std::size_t>(n));
    while (!holder.empty() && std::isspace(static_cast<unsigned char>(holder.back())))
      holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK)
      throw IoError("--checkpoint-dir " + dir.string() + ": cannot lock " + file.string() + ": " +
                    std::strerror(err));
    throw IoError("--checkpoint-dir " + dir.string() + " belongs to another run that is still " +
                  "running (" + (holder.empty() ? "holder unknown" : clip(holder, 300)) +
                  ", lock " + file.string() +
                  "); a checkpoint folder is written by one run at a time: wait for it to end "
                  "or choose another folder");
  }
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown");
  const std::string who =
      "pid " + std::to_string(::getpid()) + " on host " + std::string(host) + "\n";
  // Best effort: the lock is the flock, the text only names its holder to the next run.
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, who.data(), who.size(), 0);
}

CheckpointLock::~CheckpointLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

CheckpointLock::CheckpointLock(CheckpointLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

CheckpointLock& CheckpointLock::operator=(CheckpointLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

namespace {

// The absolute form with every existing symlink and `..` resolved.
fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path a = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::absolute(p).lexically_normal() : a;
}

// The name `path` has inside `dir` when it is one this format owns there, else "".
std::string owned_name(const fs::path& path, const fs::path& dir) {
  const fs::path rel = path.lexically_relative(dir);
  if (rel.empty() || *rel.begin() == ".." || rel == ".") return "";
  const std::string first = rel.begin()->string();
  if (first == "latest" || first == kCheckpointLockName || is_step_dir_name(first))
    return rel.string();
  return "";
}

}  // namespace

void check_outputs_outside_checkpoints(const std::vector<std::pair<std::string, fs::path>>& outputs,
                                       const std::vector<fs::path>& checkpoint_dirs) {
  struct Owned {
    dev_t dev;
    ino_t ino;
    fs::path file;
  };
  std::vector<std::pair<fs::path, fs::path>> dirs;  // as given, resolved
  std::vector<Owned> files;                         // every existing file this format owns
  for (const auto& d : checkpoint_dirs) {
    if (d.empty()) continue;
    dirs.emplace_back(d, resolved(d));
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    for (auto it = fs::recursive_directory_iterator(d, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it.depth() == 0 && owned_name(resolved(it->path()), dirs.back().second).empty()) {
        it.disable_recursion_pending();
        continue;
      }
      struct stat st {};
      if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
        files.push_back({st.st_dev, st.st_ino, it->path()});
    }
  }
  for (const auto& [what, out] : outputs) {
    if (out.empty()) continue;
    const fs::path r = resolved(out);
    for (const auto& [given, dir] : dirs)
      if (const std::string name = owned_name(r, dir); !name.empty())
        throw IoError(what + " " + out.string() + ": is " + (given / name).string() +
                      ", a file of the checkpoint folder " + given.string() +
                      " that this run reads or writes; refusing it before training (choose "
                      "another output name)");
    struct stat st {};
    if (::stat(out.c_str(), &st) == 0)
      for (const auto& f : files)
        if (f.dev == st.st_dev && f.ino == st.st_ino)
          throw IoError(what + " " + out.string() + ": is the same file as " + f.file.string() +
                        " of a checkpoint folder this run reads or writes; refusing it before "
                        "training (choose another output name)");
  }
}

}  // namespace cephalo::backend
