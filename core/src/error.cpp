#include "cephalo/core/error.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace cephalo {
namespace {

// A JSON path holds keys from the file (clipped like any echo, with room for a few levels);
// "expected" may list every allowed key or name.
constexpr std::size_t kMaxPathChars = 2 * kMaxEchoChars;
constexpr std::size_t kMaxExpectedChars = 10 * kMaxEchoChars;

std::string validation_message(const std::string& file, const std::string& path,
                               const std::string& value, const std::string& expected) {
  std::ostringstream out;
  out << (file.empty() ? "<input>" : file) << ": at " << (path.empty() ? "$" : path);
  if (!value.empty()) out << ": got " << value;
  out << "; expected " << expected;
  return out.str();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string not_found_message(const std::string& what, const std::string& name,
                              const std::vector<std::string>& known) {
  std::ostringstream out;
  out << "unknown " << what << " \"" << clip(name) << "\"";
  auto close = closest_names(name, known);
  if (!close.empty()) {
    out << "; closest known: ";
    for (std::size_t i = 0; i < close.size(); ++i) out << (i ? ", " : "") << close[i];
  }
  return out.str();
}

}  // namespace

ValidationError::ValidationError(std::string file, std::string json_path, std::string value,
                                 std::string expected)
    : Error(validation_message(file, clip(json_path, kMaxPathChars), clip(value),
                               clip(expected, kMaxExpectedChars))),
      file_(std::move(file)),
      json_path_(clip(json_path, kMaxPathChars)),
      value_(clip(value)),
      expected_(clip(expected, kMaxExpectedChars)) {}

NotFoundError::NotFoundError(const std::string& what, const std::string& name,
                             const std::vector<std::string>& known)
    : Error(not_found_message(what, name, known)) {}

std::string clip(const std::string& text, std::size_t max) {
  if (text.size() <= max) return text;
  std::size_t cut = max;
  // Back up to the start of a UTF-8 character (continuation bytes are 10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "... (" + std::to_string(text.size()) + " bytes in all)";
}

std::vector<std::string> closest_names(const std::string& name,
                                       const std::vector<std::string>& known,
                                       std::size_t how_many) {
  // Edit distance is quadratic; a name this long is not a typo of anything we know.
  if (name.size() > kMaxEchoChars) return {};
  std::vector<std::pair<std::size_t, std::string>> scored;
  const std::string key = lower(name);
  for (const auto& candidate : known) {
    std::string c = lower(candidate);
    std::size_t d = edit_distance(key, c);
    // A substring match is a strong hint ("a100" for "A100-80GB").
    if (!key.empty() && (c.find(key) != std::string::npos || key.find(c) != std::string::npos))
      d = std::min<std::size_t>(d, 1);
    scored.emplace_back(d, candidate);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (const auto& [d, candidate] : scored) {
    if (out.size() == how_many) break;
    if (std::find(out.begin(), out.end(), candidate) == out.end()) out.push_back(candidate);
  }
  return out;
}

ErrorKind error_kind(const std::exception& e) {
  if (dynamic_cast<const ValidationError*>(&e) || dynamic_cast<const NotFoundError*>(&e))
    return ErrorKind::InvalidInput;
  if (dynamic_cast<const InfeasibleError*>(&e)) return ErrorKind::Infeasible;
  if (dynamic_cast<const IoError*>(&e)) return ErrorKind::Io;
  return ErrorKind::Runtime;
}

}  // namespace cephalo
