// The start-up cache of the shipped calibration's fit (fit_cache.hpp, costmodels/README.md).
//
// One file per (data folder, code object) in the user cache folder; it holds a header (magic,
// format version, the key, the payload's size and XXH3 checksum) and the payload (the built-in
// catalogs' indexes, the tables, then the fitted model, every double bit for bit). The key is XXH3
// over the build id of the code that fits and the bytes of every input of the fit (catalogs, the
// shipped models' configs, the profiles, the published throughput points): a changed input or a
// rebuilt binary gives another key, and the entry is refitted and replaced. A file whose header,
// size, key or checksum does not match is ignored, never trusted. The entry's name is opened
// without following links and only as a regular file of bounded size: a link, FIFO, device or
// huge file planted there is ignored (with a note) rather than followed, blocked on or read
// whole. Writes go through replace_file_atomically (a fresh temporary renamed over the name
// itself), so concurrent processes never leave a torn file and a link planted at the name is
// replaced, never written through.
#include "fit_cache.hpp"

#include "fit_cache_buffer.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "cephalo/core/error.hpp"
#include "cephalo/core/output_file.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/profile.hpp"

namespace cephalo::costmodels {
namespace fs = std::filesystem;
namespace {
using fit_cache_io::FileBuffer;

constexpr char kMagic[8] = {'C', 'E', 'P', 'H', 'F', 'I', 'T', '\n'};
constexpr std::uint32_t kFormat = 3;  // 3: the catalogs' indexes first

struct Corrupt {};  // a payload that does not decode: the entry is ignored

// --- bytes -----------------------------------------------------------------------------------
void put_raw(std::string& out, const void* p, std::size_t n) {
  out.append(static_cast<const char*>(p), n);
}
void put_u64(std::string& out, std::uint64_t v) { put_raw(out, &v, sizeof v); }
void put_i64(std::string& out, std::int64_t v) { put_raw(out, &v, sizeof v); }
void put_f64(std::string& out, double v) { put_raw(out, &v, sizeof v); }
void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}
void get_raw(const char*& p, const char* end, void* dst, std::size_t n) {
  if (static_cast<std::size_t>(end - p) < n) throw Corrupt{};
  std::memcpy(dst, p, n);
  p += n;
}
std::uint64_t get_u64(const char*& p, const char* end) {
  std::uint64_t v = 0;
  get_raw(p, end, &v, sizeof v);
  return v;
}
std::int64_t get_i64(const char*& p, const char* end) {
  std::int64_t v = 0;
  get_raw(p, end, &v, sizeof v);
  return v;
}
int get_int(const char*& p, const char* end) {
  const std::int64_t v = get_i64(p, end);
  if (v < INT32_MIN || v > INT32_MAX) throw Corrupt{};
  return static_cast<int>(v);
}
double get_f64(const char*& p, const char* end) {
  double v = 0;
  get_raw(p, end, &v, sizeof v);
  return v;
}
// A count of items each at least `min_bytes` long: bounded by what is left.
std::size_t get_count(const char*& p, const char* end, std::size_t min_bytes = 1) {
  const std::uint64_t n = get_u64(p, end);
  if (n > static_cast<std::uint64_t>(end - p) / std::max<std::size_t>(min_bytes, 1))
    throw Corrupt{};
  return static_cast<std::size_t>(n);
}
std::string get_str(const char*& p, const char* end) {
  const std::size_t n = get_count(p, end);
  std::string s(p, n);
  p += n;
  return s;
}
template <typename E>
E get_enum(const char*& p, const char* end, int last) {
  const int v = get_int(p, end);
  if (v < 0 || v > last) throw Corrupt{};
  return static_cast<E>(v);
}

void put_doubles(std::string& out, const std::vector<double>& v) {
  put_u64(out, v.size());
  for (double d : v) put_f64(out, d);
}
std::vector<double> get_doubles(const char*& p, const char* end) {
  std::vector<double> v(get_count(p, end, 8));
  for (auto& d : v) d = get_f64(p, end);
  return v;
}
template <std::size_t N>
void put_array(std::string& out, const std::array<double, N>& a) {
  for (double d : a) put_f64(out, d);
}
template <std::size_t N>
std::array<double, N> get_array(const char*& p, const char* end) {
  std::array<double, N> a{};
  for (auto& d : a) d = get_f64(p, end);
  return a;
}

// --- the key ---------------------------------------------------------------------------------
// The build id of the object (executable or shared library) holding `address`, in hex, and that
// object's path; empty id when it has none.
struct CodeObject {
  const void* address = nullptr;
  std::string build_id, path;
};
int find_object(dl_phdr_info* info, std::size_t, void* data) {
  auto* obj = static_cast<CodeObject*>(data);
  const auto a = reinterpret_cast<std::uintptr_t>(obj->address);
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && a >= start && a < start + ph.p_memsz) holds = true;
  }
  if (!holds) return 0;
  obj->path = info->dlpi_name ? info->dlpi_name : "";
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const std::size_t align = ph.p_align == 8 ? 8 : 4;
    auto round = [&](std::size_t n) { return (n + align - 1) / align * align; };
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) note;
      std::memcpy(&note, p, sizeof note);
      const char* name = p + sizeof note;
      const char* desc = name + round(note.n_namesz);
      if (desc + note.n_descsz > end) break;
      if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 &&
          std::memcmp(name, "GNU", 4) == 0) {
        static const char* hex = "0123456789abcdef";
        for (std::size_t k = 0; k < note.n_descsz; ++k) {
          const auto b = static_cast<unsigned char>(desc[k]);
          obj->build_id += hex[b >> 4];
          obj->build_id += hex[b & 15];
        }
        return 1;
      }
      p = desc + round(note.n_descsz);
    }
  }
  return 1;
}
const CodeObject& this_code() {
  static const CodeObject obj = [] {
    static const char anchor = 0;
    CodeObject o;
    o.address = &anchor;
    dl_iterate_phdr(find_object, &o);
    if (o.path.empty()) {  // the executable itself
      std::error_code ec;
      o.path = fs::read_symlink("/proc/self/exe", ec).string();
    }
    return o;
  }();
  return obj;
}

// Whether CEPHALO_CACHE turns the cache off. A value that is neither on nor off is refused: read
// as "on" it would leave a user who wrote OFF or disable with the cache they meant to turn off.
bool cache_turned_off() {
  const char* raw = std::getenv("CEPHALO_CACHE");
  if (raw == nullptr || *raw == 0) return false;
  std::string v = raw;
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (v == "off" || v == "0" || v == "no" || v == "false") return true;
  if (v == "on" || v == "1" || v == "yes" || v == "true") return false;
  std::string shown;
  for (const unsigned char c : std::string_view(raw).substr(0, 64))
    shown += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  throw ValidationError("environment", "CEPHALO_CACHE", "\"" + shown + "\"",
                        "on (1, yes, true; the default) or off (0, no, false), in any case: "
                        "whether the start-up cache of the shipped fit is read and written");
}

// Where the entry lives; nullopt when the cache is off (CEPHALO_CACHE=off) or has no folder.
std::optional<fs::path> cache_folder() {
  if (cache_turned_off()) return std::nullopt;
  if (const char* d = std::getenv("CEPHALO_CACHE_DIR"); d && *d) return fs::path(d);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x && fs::path(x).is_absolute())
    return fs::path(x) / "cephalo";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "cephalo";
  return std::nullopt;
}

// The inputs of the shipped fit, in a fixed order. A file that cannot be read hashes as absent.
std::vector<fs::path> fit_inputs() {
  const fs::path data = data_dir();
  std::vector<fs::path> files = {
      data / "catalog" / "gpus.json", data / "catalog" / "models.json",
      data / "calibration" / "cephalo-profiles" / "model_latencies.json"};
  // The configs the model catalog names, and the published points (every .json, as the loaders
  // read them).
  for (const fs::path& dir : {data / "models", data / "calibration" / "published-throughput"}) {
    std::vector<fs::path> in_dir;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".json") in_dir.push_back(it->path());
    std::sort(in_dir.begin(), in_dir.end());
    files.insert(files.end(), in_dir.begin(), in_dir.end());
  }
  return files;
}

struct Entry {
  fs::path file;
  std::uint64_t key = 0;
};
std::optional<Entry> entry(FileBuffer& buffer) {
  const auto folder = cache_folder();
  const CodeObject& code = this_code();
  if (!folder || code.build_id.empty()) return std::nullopt;  // no identity: never cached
  XXH3_state_t* s = XXH3_createState();
  XXH3_64bits_reset(s);
  auto add = [&](std::string_view text) {
    const std::uint64_t n = text.size();
    XXH3_64bits_update(s, &n, sizeof n);
    XXH3_64bits_update(s, text.data(), text.size());
  };
  add(code.build_id);
  add(std::to_string(kFormat));
  for (const auto& f : fit_inputs()) {
    add(f.native());
    const auto text = buffer.read(f);
    add(text ? *text : std::string_view("<absent>"));
  }
  Entry e;
  e.key = XXH3_64bits_digest(s);
  XXH3_freeState(s);
  // The file's name: one per data folder and code object, so a rebuild replaces its entry.
  const std::string slot = data_dir().string() + "\n" + code.path;
  char name[64];
  std::snprintf(name, sizeof name, "calibrated-fit-%016llx.bin",
                static_cast<unsigned long long>(XXH3_64bits(slot.data(), slot.size())));
  e.file = *folder / name;
  return e;
}

// An entry is ~160 KB; anything far larger at its name is not one, and is not read whole.
constexpr std::size_t kMaxEntryBytes = std::size_t{64} << 20;

// Why an entry that was there was not used, for the command's note (start_up_cache_note).
// Written once, while State is built; read without building it.
std::string& ignored_entry_note() {
  static std::string note;
  return note;
}
void note_ignored_entry(const Entry& e, const std::string& why) {
  ignored_entry_note() = "the start-up cache entry " + e.file.string() + " " + why +
                         "; ignored: the shipped fit was refitted and the entry is rewritten";
}

// The payload of a valid entry (a view into `buffer`), else nullopt. A missing entry, or one of
// another build or other inputs (the key; a rebuild's normal refit), is ignored without a word;
// one that is there but not an entry (a link, not a regular file, corrupt) leaves a note.
std::optional<std::string_view> read_payload(const Entry& e, FileBuffer& buffer) {
  FileBuffer::OwnFile own{kMaxEntryBytes, ""};
  const auto read = buffer.read(e.file, &own);
  if (!read) {
    if (!own.why.empty()) note_ignored_entry(e, own.why);
    return std::nullopt;
  }
  const std::string_view bytes = *read;
  constexpr std::size_t header = sizeof kMagic + 4 + 8 + 8 + 8;
  if (bytes.size() < header || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    note_ignored_entry(e, bytes.size() < header ? "is cut short (" + std::to_string(bytes.size()) +
                                                      " bytes, less than its header)"
                                                : "is not a cache entry (its first bytes)");
    return std::nullopt;
  }
  const char* p = bytes.data() + sizeof kMagic;
  std::uint32_t format = 0;
  std::uint64_t key = 0, size = 0, sum = 0;
  std::memcpy(&format, p, 4);
  std::memcpy(&key, p + 4, 8);
  std::memcpy(&size, p + 12, 8);
  std::memcpy(&sum, p + 20, 8);
  if (format != kFormat || key != e.key) return std::nullopt;
  if (size != bytes.size() - header || XXH3_64bits(bytes.data() + header, size) != sum) {
    note_ignored_entry(e, size != bytes.size() - header
                              ? "holds " + std::to_string(bytes.size() - header) +
                                    " payload bytes where its header says " + std::to_string(size)
                              : "fails its checksum");
    return std::nullopt;
  }
  return bytes.substr(header);
}

void put_catalog(std::string& out, const CatalogIndex& c) {
  put_u64(out, c.name.size());
  for (std::size_t i = 0; i < c.name.size(); ++i)
    for (const auto* s : {&c.name[i], &c.where[i], &c.text[i]}) put_str(out, *s);
  put_u64(out, c.keys.size());
  for (const auto& [key, at] : c.keys) {
    put_str(out, key);
    put_u64(out, at);
  }
}
CatalogIndex get_catalog(const char*& p, const char* end) {
  CatalogIndex c;
  const std::size_t n = get_count(p, end, 24);
  for (auto* v : {&c.name, &c.where, &c.text}) v->reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    for (auto* v : {&c.name, &c.where, &c.text}) v->push_back(get_str(p, end));
  const std::size_t k = get_count(p, end, 16);
  c.keys.reserve(k);
  for (std::size_t i = 0; i < k; ++i) {
    std::string key = get_str(p, end);
    const std::uint64_t at = get_u64(p, end);
    if (at >= n) throw Corrupt{};
    c.keys.emplace_back(std::move(key), static_cast<std::size_t>(at));
  }
  return c;
}

struct State {
  std::optional<Entry> entry;
  FileBuffer buffer;  // holds the payload
  std::optional<std::string_view> payload;
  std::optional<CatalogIndex> catalogs[2];  // decoded at once, handed out by cached_catalog
  std::size_t tables_offset = 0;            // where the tables start in the payload
  std::size_t model_offset = 0;             // where the model starts in the payload
};
State& state() {
  static State s = [] {
    State st;
    // Outside the try: a corrupt entry is ignored, a CEPHALO_CACHE that says neither on nor off
    // is the user's error to hear about.
    (void)cache_turned_off();
    try {
      st.entry = entry(st.buffer);
      if (st.entry) st.payload = read_payload(*st.entry, st.buffer);
      if (st.payload) {
        const char* p = st.payload->data();
        const char* end = p + st.payload->size();
        for (auto& c : st.catalogs) c = get_catalog(p, end);
        st.tables_offset = static_cast<std::size_t>(p - st.payload->data());
      }
    } catch (...) {
      if (st.entry && st.payload) note_ignored_entry(*st.entry, "does not decode");
      st.payload.reset();
      for (auto& c : st.catalogs) c.reset();
    }
    return st;
  }();
  return s;
}

}  // namespace

// --- the codec -------------------------------------------------------------------------------
namespace {
void put_impl(std::string& out, const Implementation& impl) {
  if (impl.stack || !impl.stack_file.empty()) throw Corrupt{};  // not a profile row's
  put_i64(out, static_cast<int>(impl.attention));
  put_i64(out, impl.fused_elementwise);
  put_i64(out, impl.compiled);
  put_i64(out, static_cast<int>(impl.framework));
  put_i64(out, impl.framework_declared);
}
Implementation get_impl(const char*& p, const char* end) {
  Implementation impl;
  impl.attention = get_enum<AttentionKernel>(p, end, 1);
  impl.fused_elementwise = get_int(p, end) != 0;
  impl.compiled = get_int(p, end) != 0;
  impl.framework = get_enum<Framework>(p, end, 3);
  impl.framework_declared = get_int(p, end) != 0;
  return impl;
}
void put_row(std::string& out, const LayerProfile& r) {
  for (const auto* s : {&r.model, &r.gpu, &r.file_model, &r.file_gpu, &r.file}) put_str(out, *s);
  put_i64(out, r.seq);
  put_i64(out, static_cast<int>(r.dtype));
  put_i64(out, static_cast<int>(r.shape));
  put_impl(out, r.implementation);
  for (const auto* f : {&r.forward, &r.backward}) {
    put_f64(out, f->slope_ms);
    put_f64(out, f->intercept_ms);
  }
  put_u64(out, r.micro_batches.size());
  for (int m : r.micro_batches) put_i64(out, m);
  put_doubles(out, r.forward_ms);
  put_doubles(out, r.backward_ms);
  put_doubles(out, r.recompute_ms);
}
LayerProfile get_row(const char*& p, const char* end) {
  LayerProfile r;
  for (auto* s : {&r.model, &r.gpu, &r.file_model, &r.file_gpu, &r.file}) *s = get_str(p, end);
  r.seq = get_int(p, end);
  r.dtype = get_enum<Dtype>(p, end, static_cast<int>(Dtype::BF16));
  r.shape = get_enum<ProfileShape>(p, end, static_cast<int>(ProfileShape::CombinedSlope));
  r.implementation = get_impl(p, end);
  for (auto* f : {&r.forward, &r.backward}) {
    f->slope_ms = get_f64(p, end);
    f->intercept_ms = get_f64(p, end);
  }
  r.micro_batches.resize(get_count(p, end, 8));
  for (auto& m : r.micro_batches) m = get_int(p, end);
  r.forward_ms = get_doubles(p, end);
  r.backward_ms = get_doubles(p, end);
  r.recompute_ms = get_doubles(p, end);
  return r;
}
void put_theta(std::string& out, const Theta& t) {
  put_array(out, t.forward);
  put_array(out, t.backward);
  put_i64(out, t.rows);
}
Theta get_theta(const char*& p, const char* end) {
  Theta t;
  t.forward = get_array<kNumFeatures>(p, end);
  t.backward = get_array<kNumFeatures>(p, end);
  t.rows = get_int(p, end);
  return t;
}
}  // namespace

void FitCacheCodec::encode(const ProfileTables& t, std::string& out) {
  // Only what the shipped Cephalo file fills: the own format's units and optimizer rows never
  // occur there (a table that has them is not cached).
  if (!t.units_.empty() || !t.optimizers_.empty()) throw Corrupt{};
  put_u64(out, t.rows_.size());
  for (const auto& r : t.rows_) put_row(out, r);
  put_u64(out, t.unresolved_.size());
  for (const auto& n : t.unresolved_) put_str(out, n);
}

ProfileTables FitCacheCodec::decode_tables(const char*& p, const char* end) {
  ProfileTables t;
  const std::size_t n = get_count(p, end, 64);
  t.rows_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) t.add(get_row(p, end));
  if (t.rows_.size() != n) throw Corrupt{};  // rows are unique as stored
  const std::size_t u = get_count(p, end, 8);
  for (std::size_t i = 0; i < u; ++i) t.unresolved_.push_back(get_str(p, end));
  return t;
}

void FitCacheCodec::encode(const CalibratedComputeModel& m, const ProfileTables& fitted_on,
                           std::string& out) {
  for (bool b : {m.median_of_gpus_, m.waves_, m.family_per_dtype_, m.factors_per_pipeline_})
    put_i64(out, b);
  put_f64(out, m.power_exponent_);
  put_array(out, m.watts_per_flops_);
  put_f64(out, m.int32_share_);
  for (const auto* f : {&m.family_, &m.model_}) {
    put_u64(out, f->size());
    for (const auto& [k, v] : *f) {
      put_str(out, k);
      put_array(out, v);
    }
  }
  put_u64(out, m.local_.size());
  for (const auto& [k, v] : m.local_) {
    put_str(out, std::get<0>(k));
    put_i64(out, std::get<1>(k));
    put_str(out, std::get<2>(k));
    put_array(out, v);
  }
  auto put_by_dtype = [&](const CalibratedComputeModel::ByDtype& b) {
    for (const auto& a : b.f) put_array(out, a);
  };
  for (const auto* f : {&m.family_by_name_, &m.model_by_name_}) {
    put_u64(out, f->size());
    for (const auto& [k, v] : *f) {
      put_str(out, k);
      put_by_dtype(v);
    }
  }
  put_u64(out, m.local_by_name_.size());
  for (const auto& [gpu, families] : m.local_by_name_) {
    put_str(out, gpu);
    put_u64(out, families.size());
    for (const auto& [k, v] : families) {
      put_str(out, k);
      put_by_dtype(v);
    }
  }
  for (const auto* f : {&m.per_gpu_, &m.per_generation_}) {
    put_u64(out, f->size());
    for (const auto& [k, v] : *f) {
      put_str(out, k.first);
      put_i64(out, k.second);
      put_theta(out, v);
    }
  }
  put_u64(out, m.pooled_.size());
  for (const auto& [k, v] : m.pooled_) {
    put_i64(out, k);
    put_theta(out, v);
  }
  put_u64(out, m.dropped_.size());
  const auto& rows = fitted_on.rows();
  for (const auto& d : m.dropped_) {
    if (d.row < rows.data() || d.row >= rows.data() + rows.size()) throw Corrupt{};
    put_u64(out, static_cast<std::uint64_t>(d.row - rows.data()));
    put_str(out, d.reason);
  }
  put_u64(out, m.stack_.size());
  for (const auto& [k, v] : m.stack_) {
    put_i64(out, k);
    put_f64(out, v.first);
    put_i64(out, v.second);
  }
  put_u64(out, m.stack_attention_.size());
  for (const auto& [k, v] : m.stack_attention_) {
    put_i64(out, k);
    put_f64(out, v);
  }
}

std::shared_ptr<CalibratedComputeModel> FitCacheCodec::decode_model(
    const char*& p, const char* end, const ProfileTables& fitted_on) {
  auto m = std::make_shared<CalibratedComputeModel>();
  for (bool* b :
       {&m->median_of_gpus_, &m->waves_, &m->family_per_dtype_, &m->factors_per_pipeline_})
    *b = get_int(p, end) != 0;
  m->power_exponent_ = get_f64(p, end);
  m->watts_per_flops_ = get_array<2>(p, end);
  m->int32_share_ = get_f64(p, end);
  for (auto* f : {&m->family_, &m->model_}) {
    const std::size_t n = get_count(p, end, 24);
    for (std::size_t i = 0; i < n; ++i) {
      std::string k = get_str(p, end);
      (*f)[k] = get_array<2>(p, end);
    }
  }
  for (std::size_t i = 0, n = get_count(p, end, 40); i < n; ++i) {
    std::string a = get_str(p, end);
    const int c = get_int(p, end);
    std::string b = get_str(p, end);
    m->local_[{a, c, b}] = get_array<2>(p, end);
  }
  auto get_by_dtype = [&] {
    CalibratedComputeModel::ByDtype b;
    for (auto& a : b.f) a = get_array<2>(p, end);
    return b;
  };
  for (auto* f : {&m->family_by_name_, &m->model_by_name_}) {
    for (std::size_t i = 0, n = get_count(p, end, 40); i < n; ++i) {
      std::string k = get_str(p, end);
      (*f)[k] = get_by_dtype();
    }
  }
  for (std::size_t i = 0, n = get_count(p, end, 16); i < n; ++i) {
    std::string gpu = get_str(p, end);
    auto& families = m->local_by_name_[gpu];
    for (std::size_t j = 0, nf = get_count(p, end, 40); j < nf; ++j) {
      std::string k = get_str(p, end);
      families[k] = get_by_dtype();
    }
  }
  for (auto* f : {&m->per_gpu_, &m->per_generation_}) {
    for (std::size_t i = 0, n = get_count(p, end, 96); i < n; ++i) {
      std::string k = get_str(p, end);
      const int c = get_int(p, end);
      (*f)[{k, c}] = get_theta(p, end);
    }
  }
  for (std::size_t i = 0, n = get_count(p, end, 96); i < n; ++i) {
    const int k = get_int(p, end);
    m->pooled_[k] = get_theta(p, end);
  }
  const auto& rows = fitted_on.rows();
  for (std::size_t i = 0, n = get_count(p, end, 16); i < n; ++i) {
    const std::uint64_t at = get_u64(p, end);
    if (at >= rows.size()) throw Corrupt{};
    m->dropped_.push_back({&rows[at], get_str(p, end)});
  }
  for (std::size_t i = 0, n = get_count(p, end, 24); i < n; ++i) {
    const int k = get_int(p, end);
    const double f = get_f64(p, end);
    m->stack_[k] = {f, get_int(p, end)};
  }
  for (std::size_t i = 0, n = get_count(p, end, 16); i < n; ++i) {
    const int k = get_int(p, end);
    m->stack_attention_[k] = get_f64(p, end);
  }
  return m;
}

std::string start_up_cache_note() { return ignored_entry_note(); }

namespace fit_cache {

std::optional<CatalogIndex> cached_catalog(BuiltinCatalog which) {
  State& s = state();
  if (!s.payload) return std::nullopt;
  return std::exchange(s.catalogs[static_cast<int>(which)], std::nullopt);
}

std::unique_ptr<ProfileTables> cached_tables() {
  State& s = state();
  if (!s.payload) return nullptr;
  try {
    const char* p = s.payload->data() + s.tables_offset;
    const char* end = p + s.payload->size();
    auto t = std::make_unique<ProfileTables>(FitCacheCodec::decode_tables(p, end));
    s.model_offset = static_cast<std::size_t>(p - s.payload->data());
    return t;
  } catch (const Corrupt&) {
    note_ignored_entry(*s.entry, "does not decode");
    s.payload.reset();
    return nullptr;
  }
}

std::shared_ptr<CalibratedComputeModel> cached_model(const ProfileTables& tables) {
  State& s = state();
  if (!s.payload || s.model_offset == 0) return nullptr;
  try {
    const char* p = s.payload->data() + s.model_offset;
    const char* end = s.payload->data() + s.payload->size();
    auto m = FitCacheCodec::decode_model(p, end, tables);
    if (p != end) throw Corrupt{};
    return m;
  } catch (const Corrupt&) {
    note_ignored_entry(*s.entry, "does not decode");
    return nullptr;
  }
}

void store(const ProfileTables& tables, const CalibratedComputeModel& model) {
  const State& s = state();
  if (!s.entry) return;
  try {
    std::string payload;
    put_catalog(payload, GpuCatalog::builtin().index());
    put_catalog(payload, ModelCatalog::builtin().index());
    FitCacheCodec::encode(tables, payload);
    FitCacheCodec::encode(model, tables, payload);
    std::string bytes(kMagic, sizeof kMagic);
    put_raw(bytes, &kFormat, 4);
    put_u64(bytes, s.entry->key);
    put_u64(bytes, payload.size());
    put_u64(bytes, XXH3_64bits(payload.data(), payload.size()));
    bytes += payload;
    std::error_code ec;
    fs::create_directories(s.entry->file.parent_path(), ec);
    replace_file_atomically(s.entry->file, bytes);
  } catch (...) {
    // Unwritable folder, full disk, a state the codec does not cover: the next start fits again.
  }
}

}  // namespace fit_cache
}  // namespace cephalo::costmodels
