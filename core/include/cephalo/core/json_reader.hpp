#pragma once
// Validated access to a JSON document. Every accessor knows its file and JSON path, so every
// error names both, the offending value and what was expected. Objects read through a
// JsonReader reject keys that were never asked for (call finish() after reading an object).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cephalo/core/error.hpp"
#include "cephalo/core/units.hpp"

namespace cephalo {

using Json = nlohmann::json;

// Bounds on every JSON input, checked while reading (before anything is built from it).
// Deeper nesting than any of our schemas needs (they use < 10 levels) is refused, so nothing
// recursive ever meets a document deep enough to overflow the stack.
constexpr std::size_t kMaxJsonDepth = 256;
// A plan for 1M ranks, pretty-printed, is about 200 MB.
constexpr std::uint64_t kMaxJsonFileBytes = std::uint64_t{1} << 30;

// The bytes of an input file. Only regular files are opened: a FIFO, directory, socket or
// device gets an IoError at once (a FIFO would block, a device could stream forever), as does
// a file over kMaxJsonFileBytes.
std::string read_input_file(const std::filesystem::path& file);

// Parses JSON text read from `file` (used in messages). ValidationError (path "$") for
// malformed JSON, with line and column; ValidationError at the key's path for a key given
// twice in one object (with both positions) and for nesting deeper than kMaxJsonDepth.
Json parse_json_text(const std::string& text, const std::string& file);

// read_input_file + parse_json_text.
Json read_json_file(const std::filesystem::path& file);

// Writes `text` to `file` atomically: a temporary in the same folder, flushed, then renamed.
void write_file_atomically(const std::filesystem::path& file, const std::string& text);

// Renders a JSON value compactly for error messages (long values are shortened).
std::string brief(const Json& value);

class JsonReader {
 public:
  JsonReader(const Json& value, std::string file, std::string path = "");

  const Json& value() const { return *value_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  // Path as printed in messages ("$" for the root).
  std::string where() const { return path_.empty() ? "$" : path_; }

  [[noreturn]] void fail(const std::string& expected) const;
  [[noreturn]] void fail_value(const std::string& value, const std::string& expected) const;

  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }
  bool is_string() const { return value_->is_string(); }

  // Object access. Each key read is remembered for finish().
  bool has(const std::string& key) const;
  JsonReader child(const std::string& key);  // required
  std::optional<JsonReader> optional_child(const std::string& key);
  // Fails when the object has keys that were not read, naming them and the allowed ones.
  void finish() const;
  // Marks keys as known without reading them (e.g. comments: "_comment", "source").
  void allow(std::initializer_list<std::string> keys);

  // Array access.
  std::size_t size() const;
  JsonReader element(std::size_t index) const;
  std::vector<JsonReader> elements() const;  // requires an array

  // Scalars of this value.
  std::string as_string() const;
  bool as_bool() const;
  double as_number() const;  // finite
  std::int64_t as_integer(std::int64_t min = INT64_MIN, std::int64_t max = INT64_MAX) const;
  double as_quantity(Quantity kind) const;  // number in base units or string with unit; >= 0
  // as_quantity within [lo, hi] (a physically meaningful range); the message states the range.
  double as_quantity_in(Quantity kind, double lo, double hi) const;
  std::string as_enum(const std::vector<std::string>& allowed) const;
  // A label that output prints (a table cell, a row name): a string with a visible character
  // and no control character (a newline or tab would break the table it is printed in).
  std::string as_name() const;

  // Shorthands for keys of this object.
  std::string string(const std::string& key) { return child(key).as_string(); }
  std::string string_or(const std::string& key, const std::string& fallback);
  std::string name(const std::string& key) { return child(key).as_name(); }
  std::string name_or(const std::string& key, const std::string& fallback);
  bool boolean_or(const std::string& key, bool fallback);
  double number(const std::string& key) { return child(key).as_number(); }
  double number_or(const std::string& key, double fallback);
  std::int64_t integer(const std::string& key, std::int64_t min = INT64_MIN,
                       std::int64_t max = INT64_MAX) {
    return child(key).as_integer(min, max);
  }
  std::int64_t integer_or(const std::string& key, std::int64_t fallback,
                          std::int64_t min = INT64_MIN, std::int64_t max = INT64_MAX);
  double quantity(const std::string& key, Quantity kind) { return child(key).as_quantity(kind); }
  std::optional<double> optional_quantity(const std::string& key, Quantity kind);
  double quantity_in(const std::string& key, Quantity kind, double lo, double hi) {
    return child(key).as_quantity_in(kind, lo, hi);
  }

 private:
  const Json* value_;
  std::string file_;
  std::string path_;
  std::set<std::string> used_;
};

}  // namespace cephalo
