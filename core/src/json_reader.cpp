#include "cephalo/core/json_reader.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <system_error>

#include "cephalo/core/output_file.hpp"

namespace cephalo {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

std::string type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    default:
      return "a value";
  }
}

}  // namespace

std::string brief(const Json& value) {
  // A long string is cut before it is escaped and copied; anything else is at most
  // kMaxJsonDepth deep (the reader refuses deeper documents), so dump() cannot recurse far.
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    if (s.size() > kMaxEchoChars) {
      std::string out(1, '"');  // appended, not `"\"" + ...`: GCC 12 warns falsely on that
      out += clip(s);
      out += '"';
      return out;
    }
  }
  return clip(value.dump(-1, ' ', false, Json::error_handler_t::replace));
}

JsonReader::JsonReader(const Json& value, std::string file, std::string path)
    : value_(&value), file_(std::move(file)), path_(std::move(path)) {}

void JsonReader::fail(const std::string& expected) const {
  throw ValidationError(file_, where(), brief(*value_), expected);
}

void JsonReader::fail_value(const std::string& value, const std::string& expected) const {
  throw ValidationError(file_, where(), value, expected);
}

bool JsonReader::has(const std::string& key) const {
  return value_->is_object() && value_->contains(key);
}

JsonReader JsonReader::child(const std::string& key) {
  if (!value_->is_object()) fail("an object with key \"" + key + "\"");
  std::string child_path = path_.empty() ? key : path_ + "." + key;
  auto it = value_->find(key);
  if (it == value_->end())
    throw ValidationError(file_, child_path, "nothing (missing)", "required field \"" + key + "\"");
  used_.insert(key);
  return JsonReader(*it, file_, child_path);
}

std::optional<JsonReader> JsonReader::optional_child(const std::string& key) {
  if (!value_->is_object()) fail("an object");
  if (!value_->contains(key)) return std::nullopt;
  return child(key);
}

void JsonReader::allow(std::initializer_list<std::string> keys) {
  for (const auto& k : keys) used_.insert(k);
}

void JsonReader::finish() const {
  if (!value_->is_object()) return;
  std::vector<std::string> unknown;
  for (auto it = value_->begin(); it != value_->end(); ++it)
    if (!used_.count(it.key())) unknown.push_back(it.key());
  if (unknown.empty()) return;
  std::vector<std::string> known(used_.begin(), used_.end());
  std::string first = unknown.front();
  std::string expected = "only known keys (" + join(known) + ")";
  auto close = closest_names(first, known, 1);
  if (!close.empty()) expected += "; did you mean \"" + close.front() + "\"?";
  throw ValidationError(file_, path_.empty() ? first : path_ + "." + first,
                        "unknown key \"" + first + "\"", expected);
}

std::size_t JsonReader::size() const {
  if (!value_->is_array()) fail("an array");
  return value_->size();
}

JsonReader JsonReader::element(std::size_t index) const {
  if (!value_->is_array()) fail("an array");
  if (index >= value_->size())
    throw ValidationError(file_, where() + "[" + std::to_string(index) + "]", "nothing",
                          "an element");
  return JsonReader((*value_)[index], file_, where() + "[" + std::to_string(index) + "]");
}

std::vector<JsonReader> JsonReader::elements() const {
  std::vector<JsonReader> out;
  std::size_t n = size();
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.push_back(element(i));
  return out;
}

std::string JsonReader::as_string() const {
  if (!value_->is_string()) fail("a string, not " + type_name(*value_));
  return value_->get<std::string>();
}

std::string JsonReader::as_name() const {
  const std::string s = as_string();
  const auto visible = [](unsigned char c) { return c > 0x20 && c != 0x7f; };
  const auto control = [](unsigned char c) { return c < 0x20 || c == 0x7f; };
  if (std::none_of(s.begin(), s.end(), visible) || std::any_of(s.begin(), s.end(), control))
    fail(
        "a name with a visible character and no control character (tab, newline, ...): it "
        "labels rows of the output");
  return s;
}

bool JsonReader::as_bool() const {
  if (!value_->is_boolean()) fail("true or false, not " + type_name(*value_));
  return value_->get<bool>();
}

double JsonReader::as_number() const {
  if (!value_->is_number()) fail("a number, not " + type_name(*value_));
  double v = value_->get<double>();
  if (!std::isfinite(v) || std::fabs(v) > 1e30) fail("a finite number of sensible size");
  return v;
}

std::int64_t JsonReader::as_integer(std::int64_t min, std::int64_t max) const {
  std::string range = "an integer";
  if (min != INT64_MIN && max != INT64_MAX)
    range += " from " + std::to_string(min) + " to " + std::to_string(max);
  else if (min != INT64_MIN)
    range += " >= " + std::to_string(min);
  if (value_->is_number_integer() || value_->is_number_unsigned()) {
    if (value_->is_number_unsigned() &&
        value_->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      fail(range);
    std::int64_t v = value_->get<std::int64_t>();
    if (v < min || v > max) fail(range);
    return v;
  }
  // A number written with a fraction or exponent (64.0, 6.4e1) is refused even when whole: a
  // reader that tests for an integer (is_number_integer) would see none and fall back to a
  // default, so one spelling must mean one thing everywhere.
  if (value_->is_number_float())
    fail(range + " written without a decimal point or exponent (" + brief(*value_) +
         " is a floating-point number)");
  fail(range + ", not " + type_name(*value_));
}

double JsonReader::as_quantity(Quantity kind) const {
  if (value_->is_number()) {
    double v = value_->get<double>();
    if (!std::isfinite(v) || v < 0 || v > 1e30) fail(describe_quantity(kind) + " (>= 0)");
    return v;
  }
  if (value_->is_string()) {
    auto parsed = parse_quantity(value_->get<std::string>(), kind);
    if (!parsed) fail(describe_quantity(kind));
    return *parsed;
  }
  fail(describe_quantity(kind) + ", not " + type_name(*value_));
}

double JsonReader::as_quantity_in(Quantity kind, double lo, double hi) const {
  const double v = as_quantity(kind);
  if (!(v >= lo && v <= hi)) {
    // Echo what was written, and what it means in base units when it was a string.
    std::string got = brief(*value_);
    if (value_->is_string()) got += " (" + format_quantity(v, kind) + ")";
    fail_value(got, describe_quantity(kind) + " from " + format_quantity(lo, kind) + " to " +
                        format_quantity(hi, kind));
  }
  return v;
}

std::string JsonReader::as_enum(const std::vector<std::string>& allowed) const {
  std::string expected = "one of " + join(allowed);
  if (!value_->is_string()) fail(expected);
  std::string v = value_->get<std::string>();
  for (const auto& a : allowed)
    if (a == v) return v;
  fail(expected);
}

std::string JsonReader::string_or(const std::string& key, const std::string& fallback) {
  auto c = optional_child(key);
  return c ? c->as_string() : fallback;
}

std::string JsonReader::name_or(const std::string& key, const std::string& fallback) {
  auto c = optional_child(key);
  return c ? c->as_name() : fallback;
}

bool JsonReader::boolean_or(const std::string& key, bool fallback) {
  auto c = optional_child(key);
  return c ? c->as_bool() : fallback;
}

double JsonReader::number_or(const std::string& key, double fallback) {
  auto c = optional_child(key);
  return c ? c->as_number() : fallback;
}

std::int64_t JsonReader::integer_or(const std::string& key, std::int64_t fallback, std::int64_t min,
                                    std::int64_t max) {
  auto c = optional_child(key);
  return c ? c->as_integer(min, max) : fallback;
}

std::optional<double> JsonReader::optional_quantity(const std::string& key, Quantity kind) {
  auto c = optional_child(key);
  if (!c) return std::nullopt;
  return c->as_quantity(kind);
}

}  // namespace cephalo
