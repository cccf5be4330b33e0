#include "cephalo/core/table.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace cephalo {

TextTable::TextTable(std::vector<std::string> headers) : headers_(std::move(headers)) {
  align_.assign(headers_.size(), Align::Right);
  if (!align_.empty()) align_[0] = Align::Left;
}

void TextTable::set_align(std::size_t column, Align align) {
  if (column < align_.size()) align_[column] = align;
}

void TextTable::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string TextTable::render() const {
  std::vector<std::size_t> width(headers_.size());
  for (std::size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
  for (const auto& row : rows_)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      std::string pad(width[c] - cells[c].size(), ' ');
      if (c) out += "  ";
      out +=
          align_[c] == Align::Left ? cells[c] + (c + 1 < cells.size() ? pad : "") : pad + cells[c];
    }
    return out + "\n";
  };
  std::string out = line(headers_);
  std::size_t total = 0;
  for (auto w : width) total += w;
  total += 2 * (width.empty() ? 0 : width.size() - 1);
  out += std::string(total, '-') + "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string shortest(double value) {
  char buffer[64];
  const auto r = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, r.ptr);
}

std::string format_int_list(const std::vector<int>& values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i == 8 && values.size() > 10) {
      s += ", ... (" + std::to_string(values.size()) + " in all)";
      break;
    }
    if (i) s += ", ";
    s += std::to_string(values[i]);
  }
  return s + "]";
}

std::string format_rank_range(int first, int last) {
  return first == last ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last);
}

std::vector<std::pair<int, int>> equal_runs(int n, const std::function<bool(int, int)>& same) {
  std::vector<std::pair<int, int>> runs;
  for (int i = 0; i < n; ++i) {
    if (i == 0 || !same(i - 1, i))
      runs.emplace_back(i, i + 1);
    else
      runs.back().second = i + 1;
  }
  return runs;
}

}  // namespace cephalo
