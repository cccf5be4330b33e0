#include "cephalo/core/units.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>

#include "cephalo/core/error.hpp"

namespace cephalo {
namespace {

struct UnitSuffix {
  const char* text;
  double factor;
};

// Longest suffixes first so that "GiB" is not read as "G" + "iB".
constexpr std::array kByteUnits{UnitSuffix{"TiB", 1024.0 * 1024 * 1024 * 1024},
                                UnitSuffix{"GiB", 1024.0 * 1024 * 1024},
                                UnitSuffix{"MiB", 1024.0 * 1024},
                                UnitSuffix{"KiB", 1024.0},
                                UnitSuffix{"TB", 1e12},
                                UnitSuffix{"GB", 1e9},
                                UnitSuffix{"MB", 1e6},
                                UnitSuffix{"kB", 1e3},
                                UnitSuffix{"KB", 1e3},
                                UnitSuffix{"B", 1.0}};
constexpr std::array kTimeUnits{
    UnitSuffix{"ns", 1e-9},  UnitSuffix{"us", 1e-6}, UnitSuffix{"µs", 1e-6}, UnitSuffix{"ms", 1e-3},
    UnitSuffix{"min", 60.0}, UnitSuffix{"s", 1.0},   UnitSuffix{"h", 3600.0}};
constexpr std::array kBandwidthUnits{UnitSuffix{"TB/s", 1e12},
                                     UnitSuffix{"GB/s", 1e9},
                                     UnitSuffix{"MB/s", 1e6},
                                     UnitSuffix{"kB/s", 1e3},
                                     UnitSuffix{"GiB/s", 1024.0 * 1024 * 1024},
                                     UnitSuffix{"MiB/s", 1024.0 * 1024},
                                     UnitSuffix{"B/s", 1.0},
                                     UnitSuffix{"Tbit/s", 1e12 / 8},
                                     UnitSuffix{"Gbit/s", 1e9 / 8},
                                     UnitSuffix{"Mbit/s", 1e6 / 8},
                                     UnitSuffix{"Tbps", 1e12 / 8},
                                     UnitSuffix{"Gbps", 1e9 / 8},
                                     UnitSuffix{"Mbps", 1e6 / 8}};
constexpr std::array kFlopUnits{
    UnitSuffix{"PFLOPS", 1e15},  UnitSuffix{"TFLOPS", 1e12}, UnitSuffix{"GFLOPS", 1e9},
    UnitSuffix{"MFLOPS", 1e6},   UnitSuffix{"FLOPS", 1.0},   UnitSuffix{"PFLOP/s", 1e15},
    UnitSuffix{"TFLOP/s", 1e12}, UnitSuffix{"GFLOP/s", 1e9}, UnitSuffix{"FLOP/s", 1.0}};

constexpr double kLargest = 1e30;  // anything above is a typo, not a machine

template <std::size_t N>
std::optional<double> parse_with(std::string_view text, const std::array<UnitSuffix, N>& units,
                                 bool unit_required) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  double number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  std::string_view rest(end, static_cast<std::size_t>(text.data() + text.size() - end));
  while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front())))
    rest.remove_prefix(1);
  double factor = 1.0;
  if (rest.empty()) {
    if (unit_required) return std::nullopt;
  } else {
    bool matched = false;
    for (const auto& unit : units) {
      if (rest == unit.text) {
        factor = unit.factor;
        matched = true;
        break;
      }
    }
    if (!matched) return std::nullopt;
  }
  double value = number * factor;
  if (!std::isfinite(value) || value < 0 || value > kLargest) return std::nullopt;
  return value;
}

template <std::size_t N>
std::string format_with(double value, const std::array<UnitSuffix, N>& units,
                        const char* base_unit) {
  char buffer[64];
  for (const auto& unit : units) {
    if (value >= unit.factor && unit.factor > 1.0) {
      double scaled = value / unit.factor;
      std::snprintf(buffer, sizeof buffer, scaled >= 100 ? "%.0f %s" : "%.3g %s", scaled,
                    unit.text);
      return buffer;
    }
  }
  std::snprintf(buffer, sizeof buffer, "%.3g %s", value, base_unit);
  return buffer;
}

}  // namespace

std::string describe_quantity(Quantity kind) {
  switch (kind) {
    case Quantity::Bytes:
      return "a byte size such as \"16GiB\", \"22.5GB\" or a number of bytes";
    case Quantity::Seconds:
      return "a time such as \"5us\", \"1.2ms\" or a number of seconds";
    case Quantity::Bandwidth:
      return "a bandwidth such as \"600GB/s\", \"25Gbit/s\" or a number of bytes per second";
    case Quantity::FlopRate:
      return "a FLOP rate such as \"312TFLOPS\" or a number of FLOP/s";
    case Quantity::Dimensionless:
      return "a non-negative number";
  }
  return "a value";
}

std::optional<double> parse_quantity(std::string_view text, Quantity kind) {
  switch (kind) {
    case Quantity::Bytes:
      return parse_with(text, kByteUnits, false);
    case Quantity::Seconds:
      return parse_with(text, kTimeUnits, false);
    case Quantity::Bandwidth:
      return parse_with(text, kBandwidthUnits, false);
    case Quantity::FlopRate:
      return parse_with(text, kFlopUnits, false);
    case Quantity::Dimensionless:
      return parse_with(text, std::array<UnitSuffix, 0>{}, false);
  }
  return std::nullopt;
}

std::string format_link_rate(double bytes_per_s) {
  constexpr std::array units{UnitSuffix{"Tbit/s", 1e12}, UnitSuffix{"Gbit/s", 1e9},
                             UnitSuffix{"Mbit/s", 1e6}, UnitSuffix{"kbit/s", 1e3}};
  return format_with(bytes_per_s * 8.0, units, "bit/s");
}

std::string format_quantity(double value, Quantity kind) {
  switch (kind) {
    case Quantity::Bytes: {
      constexpr std::array units{UnitSuffix{"TiB", 1024.0 * 1024 * 1024 * 1024},
                                 UnitSuffix{"GiB", 1024.0 * 1024 * 1024},
                                 UnitSuffix{"MiB", 1024.0 * 1024}, UnitSuffix{"KiB", 1024.0}};
      return format_with(value, units, "B");
    }
    case Quantity::Seconds: {
      char buffer[64];
      if (value >= 1.0 || value == 0.0)
        std::snprintf(buffer, sizeof buffer, "%.3g s", value);
      else if (value >= 1e-3)
        std::snprintf(buffer, sizeof buffer, "%.3g ms", value * 1e3);
      else if (value >= 1e-6)
        std::snprintf(buffer, sizeof buffer, "%.3g us", value * 1e6);
      else
        std::snprintf(buffer, sizeof buffer, "%.3g ns", value * 1e9);
      return buffer;
    }
    case Quantity::Bandwidth: {
      constexpr std::array units{UnitSuffix{"TB/s", 1e12}, UnitSuffix{"GB/s", 1e9},
                                 UnitSuffix{"MB/s", 1e6}, UnitSuffix{"kB/s", 1e3}};
      return format_with(value, units, "B/s");
    }
    case Quantity::FlopRate: {
      constexpr std::array units{UnitSuffix{"PFLOP/s", 1e15}, UnitSuffix{"TFLOP/s", 1e12},
                                 UnitSuffix{"GFLOP/s", 1e9}, UnitSuffix{"MFLOP/s", 1e6}};
      return format_with(value, units, "FLOP/s");
    }
    case Quantity::Dimensionless: {
      char buffer[64];
      std::snprintf(buffer, sizeof buffer, "%.6g", value);
      return buffer;
    }
  }
  return std::to_string(value);
}

std::vector<double> parse_number_list(const std::string& text, const std::string& file,
                                      const std::string& what) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      const double v = std::stod(item, &used);
      if (used != item.size() || !std::isfinite(v)) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw ValidationError(file, what, item, "a comma-separated list of numbers");
    }
  }
  if (out.empty()) throw ValidationError(file, what, text, "a non-empty list");
  return out;
}

}  // namespace cephalo
