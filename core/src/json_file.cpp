// Reading JSON input files safely: only regular files are opened (a FIFO would block forever,
// a device could stream without end), and the document is built by our own SAX handler so the
// nesting depth and duplicate keys are checked while parsing, before anything recursive (dump,
// error formatting, destruction) ever sees a deep document.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <unordered_map>

#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/output_file.hpp"

namespace cephalo {
namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Line and column (1-based) of a byte offset, for messages.
std::string line_column(const std::string& text, std::size_t offset) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// A const char* that publishes how far the parser has read, so the handler can say where a
// duplicate key or an over-deep container is (nlohmann's SAX interface gives no positions).
class TrackingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIterator(const char* p, const char** cursor) : p_(p), cursor_(cursor) {}
  reference operator*() const { return *p_; }
  TrackingIterator& operator++() {
    *cursor_ = ++p_;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const TrackingIterator& other) const { return p_ == other.p_; }
  bool operator!=(const TrackingIterator& other) const { return p_ != other.p_; }

 private:
  const char* p_;
  const char** cursor_;
};

// Builds the DOM like nlohmann's own parser, plus the two checks it lacks.
class CheckedDomBuilder final : public nlohmann::json_sax<Json> {
 public:
  CheckedDomBuilder(const std::string& text, std::string file)
      : text_(text), cursor_(text.data()), file_(std::move(file)) {}

  const char** cursor() { return &cursor_; }
  Json& root() { return root_; }
  // The error that stopped the parse, if the handler or the parser stopped it.
  std::optional<ValidationError>& error() { return error_; }

  bool null() override { return put(Json(nullptr)) != nullptr; }
  bool boolean(bool v) override { return put(Json(v)) != nullptr; }
  bool number_integer(number_integer_t v) override { return put(Json(v)) != nullptr; }
  bool number_unsigned(number_unsigned_t v) override { return put(Json(v)) != nullptr; }
  bool number_float(number_float_t v, const string_t&) override { return put(Json(v)) != nullptr; }
  bool string(string_t& v) override { return put(Json(std::move(v))) != nullptr; }
  bool binary(binary_t&) override { return false; }  // JSON text has no binary values

  bool start_object(std::size_t) override { return open(Json::object()); }
  bool start_array(std::size_t) override { return open(Json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    Frame& f = frames_.back();
    auto& object = f.value->get_ref<Json::object_t&>();
    const std::size_t offset = static_cast<std::size_t>(cursor_ - text_.data());
    auto [it, inserted] = object.emplace(std::move(k), nullptr);
    if (!inserted) {
      const std::size_t first = f.key_offsets[it->first];
      error_.emplace(file_, path_of(f, it->first),
                     "key \"" + clip(it->first) + "\" twice (at " + line_column(text_, first) +
                         " and again at " + line_column(text_, offset) + ")",
                     "each key at most once per object (JSON readers would silently keep only "
                     "one of them)");
      return false;
    }
    f.key_offsets.emplace(it->first, offset);  // the map's key string is stable
    f.key = &it->first;
    f.slot = &it->second;
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..."
    auto colon = what.find(": ", what.find("parse error"));
    std::string reason;
    if (what.find("parse error") != std::string::npos && colon != std::string::npos)
      reason = what.substr(colon + 2);
    else if (auto bracket = what.find("] "); bracket != std::string::npos)
      reason = what.substr(bracket + 2);  // e.g. out_of_range.406 "number overflow parsing"
    else
      reason = what;
    error_.emplace(file_, "$",
                   "malformed JSON at " + line_column(text_, position == 0 ? 0 : position - 1) +
                       " (" + clip(reason) + ")",
                   "a complete, valid JSON document (NaN and Infinity are not JSON; numbers "
                   "within double range)");
    return false;
  }

 private:
  struct Frame {
    Json* value = nullptr;             // the open object or array
    std::size_t next_index = 0;        // arrays: index of the next element
    const std::string* key = nullptr;  // objects: key of the value being read
    Json* slot = nullptr;              // objects: where that value goes
    std::unordered_map<std::string_view, std::size_t> key_offsets;  // key -> where it was read
  };

  // JSON path of a child of `f` (JsonReader's spelling: "a.b[2].c", "$" for the root).
  std::string path_of(const Frame& f, const std::string& key) const {
    std::string base = path_to(&f);
    return base.empty() ? key : base + "." + key;
  }
  // Path of the container `f` itself.
  std::string path_to(const Frame* f) const {
    std::string path;
    for (const Frame* p = frames_.data(); p != f; ++p) {
      if (p->value->is_array()) {
        path += (path.empty() ? "$[" : "[") + std::to_string(p->next_index - 1) + "]";
      } else {
        path += (path.empty() ? "" : ".") + *p->key;
      }
      if (path.size() > kMaxEchoChars) break;  // clipped in the message anyway
    }
    return path;
  }

  Json* put(Json value) {
    if (frames_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Frame& f = frames_.back();
    if (f.value->is_array()) {
      auto& array = f.value->get_ref<Json::array_t&>();
      array.push_back(std::move(value));
      ++f.next_index;
      return &array.back();
    }
    *f.slot = std::move(value);
    return f.slot;
  }

  bool open(Json container) {
    Json* placed = put(std::move(container));
    if (frames_.size() >= kMaxJsonDepth) {
      const std::size_t offset = static_cast<std::size_t>(cursor_ - text_.data());
      std::string path = path_to(frames_.data() + frames_.size());
      error_.emplace(
          file_, path.empty() ? "$" : path,
          "nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels (at " +
              line_column(text_, offset) + ")",
          "objects and arrays nested at most " + std::to_string(kMaxJsonDepth) + " levels deep");
      return false;
    }
    frames_.push_back(Frame{placed, 0, nullptr, nullptr, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }

  const std::string& text_;
  const char* cursor_;
  std::string file_;
  Json root_;
  std::vector<Frame> frames_;
  std::optional<ValidationError> error_;
};

}  // namespace

std::string read_input_file(const std::filesystem::path& file) {
  // Look before opening: opening a FIFO for reading blocks until a writer appears.
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) throw IoError(file.string() + ": no such file");
    throw IoError(file.string() + ": cannot be read (" + std::strerror(err) + ")");
  }
  if (S_ISDIR(st.st_mode)) throw IoError(file.string() + ": is a directory; expected a JSON file");
  if (!S_ISREG(st.st_mode))
    throw IoError(file.string() + ": is " + kind_of(st.st_mode) + "; expected a regular JSON file");
  // O_NONBLOCK: should the path have been swapped for a FIFO since the stat, open returns
  // instead of waiting; fstat below then refuses it.
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    throw IoError(file.string() + ": cannot be opened for reading (" + std::strerror(errno) + ")");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw IoError(file.string() + ": is " + kind_of(st.st_mode) + "; expected a regular JSON file");
  note_input_file(file);  // outputs of this command may not overwrite it (output_file.hpp)
  if (static_cast<std::uint64_t>(st.st_size) > kMaxJsonFileBytes)
    throw IoError(file.string() + ": " + std::to_string(st.st_size) +
                  " bytes; JSON inputs may be at most " + std::to_string(kMaxJsonFileBytes) +
                  " bytes");
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(file.string() + ": read failed (" + std::strerror(errno) + ")");
    }
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > kMaxJsonFileBytes)  // the file grew while we read it
      throw IoError(file.string() + ": more than " + std::to_string(kMaxJsonFileBytes) +
                    " bytes; JSON inputs may be at most that");
  }
  return text;
}

Json parse_json_text(const std::string& text, const std::string& file) {
  CheckedDomBuilder builder(text, file);
  const bool ok =
      Json::sax_parse(TrackingIterator(text.data(), builder.cursor()),
                      TrackingIterator(text.data() + text.size(), builder.cursor()), &builder);
  if (builder.error()) throw *builder.error();
  if (!ok) throw ValidationError(file, "$", "unreadable JSON", "a complete, valid JSON document");
  return std::move(builder.root());
}

Json read_json_file(const std::filesystem::path& file) {
  return parse_json_text(read_input_file(file), file.string());
}

}  // namespace cephalo
