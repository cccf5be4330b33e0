#pragma once
// Typed exceptions shared by every Cephalo library. Libraries throw these; `main` turns them
// into one message and an exit code (see apps/). Validation errors always say where (file and
// JSON path), what was found and what was expected, so a user can fix the input without
// reading our source.
#include <stdexcept>
#include <string>
#include <vector>

namespace cephalo {

// Base of all Cephalo errors.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Input that is well-formed JSON (or not JSON at all) but breaks a rule of the schema.
class ValidationError : public Error {
 public:
  ValidationError(std::string file, std::string json_path, std::string value, std::string expected);
  const std::string& file() const { return file_; }
  const std::string& json_path() const { return json_path_; }
  const std::string& value() const { return value_; }
  const std::string& expected() const { return expected_; }

 private:
  std::string file_;
  std::string json_path_;
  std::string value_;
  std::string expected_;
};

// A file could not be read or written (missing, a directory, permissions, disk full).
class IoError : public Error {
 public:
  using Error::Error;
};

// A name (GPU, model, profile row, op id) that is not known; the message lists close names.
class NotFoundError : public Error {
 public:
  NotFoundError(const std::string& what, const std::string& name,
                const std::vector<std::string>& known);
};

// A request that is valid input but cannot be satisfied (nothing fits in memory, no profile).
class InfeasibleError : public Error {
 public:
  using Error::Error;
};

// Failure of an external runtime (MPI, CUDA, NCCL) with the library's own error string.
class RuntimeFailure : public Error {
 public:
  using Error::Error;
};

// What kind of failure an exception is, numbered as every command's exit code says it
// (apps/commands.hpp): a ValidationError or NotFoundError is invalid input (1), an
// InfeasibleError an infeasible request (3), an IoError a file not readable or writable (5),
// anything else a runtime failure (4). One mapping for the command line's exit codes and for
// the backend's failures agreed across ranks, so both always give the same code.
enum class ErrorKind : int { InvalidInput = 1, Infeasible = 3, Runtime = 4, Io = 5 };
ErrorKind error_kind(const std::exception& e);

// Longest piece of user-supplied text a message echoes. Longer text is cut, and the cut says
// how long the original was, so a 5 MB key in a file cannot make a 10 MB error message.
constexpr std::size_t kMaxEchoChars = 200;
// `text` itself when at most `max` bytes; else its first `max` bytes (not splitting a UTF-8
// character) followed by "... (N bytes in all)".
std::string clip(const std::string& text, std::size_t max = kMaxEchoChars);

// Closest names to `name` among `known` by edit distance (case-insensitive), best first.
// Empty for names longer than kMaxEchoChars (nothing in a catalog is that long).
std::vector<std::string> closest_names(const std::string& name,
                                       const std::vector<std::string>& known,
                                       std::size_t how_many = 3);

}  // namespace cephalo
