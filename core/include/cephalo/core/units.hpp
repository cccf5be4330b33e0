#pragma once
// One helper for every value with a unit, in JSON and on the command line. Values are held in
// SI base units as double: bytes, seconds, bytes/second, FLOP/second. A JSON number is taken
// as already in base units; a string carries its unit ("16GiB", "5us", "600GB/s", "25Gbit/s",
// "312TFLOPS"). Binary prefixes (Ki, Mi, Gi, Ti) are powers of 1024, decimal ones powers of 1000.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cephalo {

enum class Quantity { Bytes, Seconds, Bandwidth, FlopRate, Dimensionless };

// What a Quantity is called in error messages ("a byte size such as \"16GiB\"").
std::string describe_quantity(Quantity kind);

// Parses `text` as `kind`. Returns nullopt when the text is not a valid value of that kind
// (unknown unit, trailing garbage, negative, NaN, infinite, or above 1e30).
std::optional<double> parse_quantity(std::string_view text, Quantity kind);

// Human-readable rendering with a sensible prefix: "16 GiB", "1.20 ms", "600 GB/s",
// "312 TFLOP/s". Round-trips through parse_quantity to within the printed precision.
std::string format_quantity(double value, Quantity kind);
inline std::string format_bytes(double bytes) { return format_quantity(bytes, Quantity::Bytes); }
inline std::string format_seconds(double s) { return format_quantity(s, Quantity::Seconds); }
inline std::string format_bandwidth(double bps) {
  return format_quantity(bps, Quantity::Bandwidth);
}
// A network link's rate (held in bytes/s like every bandwidth) in bits per second, as NICs and
// switches are specified: 50e9 B/s -> "400 Gbit/s".
std::string format_link_rate(double bytes_per_s);
inline std::string format_flop_rate(double f) { return format_quantity(f, Quantity::FlopRate); }

// A list of finite numbers as a command-line flag writes one, "0.5,0.25,0.25" (the values are
// the caller's to check). ValidationError(file, what, item, "a comma-separated list of
// numbers") names the first item that is not a number.
std::vector<double> parse_number_list(const std::string& text, const std::string& file,
                                      const std::string& what);

constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * kKiB;
constexpr double kGiB = 1024.0 * kMiB;
constexpr double kGB = 1e9;

}  // namespace cephalo
