#pragma once
// Aligned plain-text tables for the human half of every "table + JSON" output.
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace cephalo {

class TextTable {
 public:
  enum class Align { Left, Right };
  explicit TextTable(std::vector<std::string> headers);
  // Columns default to right alignment except the first; override per column.
  void set_align(std::size_t column, Align align);
  void add_row(std::vector<std::string> cells);
  std::string render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

// Fixed-point formatting helper ("12.35").
std::string fixed(double value, int decimals);
// The shortest text that reads back as `value` ("0.2", "1e-07"): how an error message echoes a
// number the user typed, unchanged.
std::string shortest(double value);
// "[0, 1, 2]"; a list of more than 10 shows its first 8, then "... (N in all)": how a message
// names a group of ranks without printing thousands of them.
std::string format_int_list(const std::vector<int>& values);
// "8-15", or "8" for one rank: how a table row or a message names a run of ranks.
std::string format_rank_range(int first, int last);
// The runs of consecutive equal rows of 0..n-1 as [begin, end) pairs (`same(i - 1, i)` holds
// inside a run): per-rank tables print one row per run with its rank range.
std::vector<std::pair<int, int>> equal_runs(int n, const std::function<bool(int, int)>& same);

}  // namespace cephalo
