// Reimplementation of the published Cephalo optimizer; see the header for the model and the
// deliberate differences. Loop order and arithmetic follow the original so that ties break the
// same way and the published example is reproduced exactly.
#include "cephalo/planner/cephalo_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"

namespace cephalo::planner {
namespace {

constexpr double kGB = 1024.0 * 1024.0 * 1024.0;  // the published code's "GB" is 2^30 bytes
constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Largest micro-batch whose memory stays within `budget_gb` (0 when even 1 does not fit).
int max_micro_batch_within(const std::vector<double>& curve, double reserve, double budget_gb) {
  constexpr int kLimit = 1 << 20;  // the curve's slope may be ~0; never loop forever
  int i = 1;
  while (i < kLimit && cephalo_memory_gb(curve, i, reserve) <= budget_gb) ++i;
  return i - 1;
}

}  // namespace

double CephaloGpu::forward(int m) const {
  if (static_cast<int>(forward_ms.size()) >= m) return forward_ms[m - 1];
  return m * forward_slope + forward_intercept;
}

double CephaloGpu::backward(int m) const {
  if (static_cast<int>(backward_ms.size()) >= m) return backward_ms[m - 1];
  return m * backward_slope + backward_intercept;
}

std::string to_string(ShareObjective objective) {
  switch (objective) {
    case ShareObjective::MinParams:
      return "min_params";
    case ShareObjective::MinUtil:
      return "min_util";
    case ShareObjective::Even:
      return "even";
  }
  return "?";
}

double cephalo_published_capacity_gb(const std::string& gpu) {
  static const std::map<std::string, double> table = {
      {"a6000", 47.99},     {"l4", 22.5},    {"p40", 22.5},   {"t4", 15},      {"v100x16", 16},
      {"v100-pciex16", 16}, {"v100x32", 32}, {"a10g", 22.49}, {"rtx3090", 24}, {"p100", 12},
      {"a100x40", 40},      {"a100x80", 80}, {"h100-nvl", 94}};
  auto it = table.find(gpu);
  return it == table.end() ? -1.0 : it->second;
}

double cephalo_memory_gb(const std::vector<double>& curve, int micro_batch, double reserve) {
  const int profiled = static_cast<int>(curve.size());
  double compute;
  if (micro_batch > profiled) {
    const int avg_len = std::min(5, profiled);
    const double growth =
        avg_len > 1 ? (curve[profiled - 1] - curve[profiled - avg_len]) / (avg_len - 1) : 0.0;
    compute = curve[profiled - 1] + growth * (micro_batch - profiled);
  } else {
    compute = curve[micro_batch - 1];
  }
  return compute + reserve;
}

std::vector<double> cephalo_split_min_params(const CephaloInputs& in, const CephaloOptions& opt,
                                             const std::vector<double>& base_memory_gb) {
  const std::size_t g = in.gpus.size();
  const double delta = opt.bytes_per_parameter / kGB;
  const double even_params = in.parameters / static_cast<double>(g);
  const double even_size = even_params * delta;
  double to_move = 0;
  std::vector<double> assigned;
  std::vector<std::pair<double, std::size_t>> spare;  // (extra parameters it can take, gpu)
  for (std::size_t i = 0; i < g; ++i) {
    const double extra = std::floor(
        (opt.usable_fraction * in.gpus[i].capacity_gb - base_memory_gb[i] - even_size) / delta);
    if (extra > 0) {
      spare.emplace_back(extra, i);
      assigned.push_back(even_params);
    } else {
      to_move += -extra;
      assigned.push_back(even_params + extra);
    }
  }
  // Water-fill the deficit into the GPUs with room, smallest room first, so the largest share
  // grows as little as possible.
  std::sort(spare.begin(), spare.end());
  double prev = 0;
  const std::size_t n_spare = spare.size();
  for (std::size_t i = 0; i < n_spare && to_move > 0; ++i) {
    const double additional = spare[i].first - prev;
    const double needed = std::floor(to_move / static_cast<double>(n_spare - i));
    const double inc = std::min(additional, needed);
    for (std::size_t j = i; j < n_spare; ++j) {
      assigned[spare[j].second] += inc;
      to_move -= inc;
    }
    prev = spare[i].first;
  }
  // The original stops here and normalises, silently overfilling when the deficit did not fit.
  // A remainder below one parameter per GPU is floor-division rounding and is harmless.
  if (to_move > static_cast<double>(g)) {
    std::ostringstream msg;
    msg << "cephalo (min_params): the training state does not fit: "
        << format_bytes(to_move * opt.bytes_per_parameter)
        << " of state have no GPU with room left (" << fixed(to_move, 0)
        << " parameters); use GPUs with more memory or a smaller global batch";
    throw InfeasibleError(msg.str());
  }
  for (double& a : assigned)
    if (a < 0) a = 0;
  return assigned;
}

std::vector<double> cephalo_split_min_util(const CephaloInputs& in, const CephaloOptions& opt,
                                           const std::vector<double>& base_memory_gb) {
  const std::size_t g = in.gpus.size();
  const double delta = opt.bytes_per_parameter / kGB;
  const double total = in.parameters;
  std::vector<std::pair<double, long>> util;  // (base memory / capacity, gpu)
  double max_es_util = 0;
  for (std::size_t i = 0; i < g; ++i) {
    const double cap = in.gpus[i].capacity_gb;
    util.emplace_back(base_memory_gb[i] / cap, static_cast<long>(i));
    max_es_util =
        std::max(max_es_util, (base_memory_gb[i] + total * delta / static_cast<double>(g)) / cap);
  }
  std::vector<double> assigned(g, 0.0);
  if (max_es_util < opt.max_balance_util) {
    for (auto& a : assigned) a = total / static_cast<double>(g);
    return assigned;
  }
  // Raise the least-utilised GPUs to the next utilisation level together, in proportion to
  // their capacity, until every parameter is placed.
  std::sort(util.begin(), util.end());
  util.emplace_back(1.0, -1);  // sentinel: full utilisation
  double remaining = total;
  double mem_sum = 0;
  for (std::size_t i = 0; i < g; ++i) {
    mem_sum += in.gpus[static_cast<std::size_t>(util[i].second)].capacity_gb;
    if (std::abs(util[i + 1].first - util[i].first) < 0.001) continue;
    const double diff = util[i + 1].first - util[i].first;
    const double split = std::min(std::trunc(mem_sum * diff / delta), remaining);
    double added = 0;
    for (std::size_t j = 0; j <= i; ++j) {
      const auto gpu = static_cast<std::size_t>(util[j].second);
      const double p =
          j == i ? split - added : std::trunc(split * in.gpus[gpu].capacity_gb / mem_sum);
      assigned[gpu] += p;
      added += p;
    }
    remaining -= split;
    if (remaining == 0) break;
  }
  if (remaining > static_cast<double>(g)) {
    std::ostringstream msg;
    msg << "cephalo (min_util): the training state does not fit: "
        << format_bytes(remaining * opt.bytes_per_parameter)
        << " of state remain once every GPU is full; use GPUs with more memory or a smaller "
           "global batch";
    throw InfeasibleError(msg.str());
  }
  return assigned;
}

CephaloSolution solve_cephalo(const CephaloInputs& in, const CephaloOptions& opt) {
  const int g = static_cast<int>(in.gpus.size());
  const int batch = in.global_batch;
  if (g == 0) throw InfeasibleError("cephalo: the cluster has no GPUs");
  if (batch < g) {
    throw InfeasibleError("cephalo: global batch " + std::to_string(batch) +
                          " is smaller than the number of GPUs (" + std::to_string(g) +
                          "); every GPU needs at least one sample: raise the global batch to " +
                          std::to_string(g) + " or more");
  }
  if (in.compute_memory_gb.empty()) throw InfeasibleError("cephalo: empty memory profile");

  CephaloSolution sol;
  const double train_gb = in.parameters * opt.bytes_per_parameter / kGB;
  for (const auto& gpu : in.gpus) {
    const double usable = opt.usable_fraction * gpu.capacity_gb;
    sol.max_micro_batch_even_share.push_back(
        max_micro_batch_within(in.compute_memory_gb, opt.comm_reserve_gb, usable - train_gb / g));
    sol.max_micro_batch_no_state.push_back(
        max_micro_batch_within(in.compute_memory_gb, opt.comm_reserve_gb, usable));
  }
  for (int i = 0; i < g; ++i) {
    if (sol.max_micro_batch_no_state[i] < 1) {
      const double need = cephalo_memory_gb(in.compute_memory_gb, 1, opt.comm_reserve_gb);
      std::ostringstream msg;
      msg << "cephalo: GPU " << i << " (" << in.gpus[i].name
          << ") cannot run even one sample: " << fixed(need, 2) << " GB needed, "
          << fixed(opt.usable_fraction * in.gpus[i].capacity_gb, 2) << " GB usable (shortfall "
          << format_bytes((need - opt.usable_fraction * in.gpus[i].capacity_gb) * kGB)
          << "); remove it or use a smaller model or sequence";
      throw InfeasibleError(msg.str());
    }
  }

  // Per-GPU per-layer forward and backward times by micro-batch size, computed once.
  const int mbs_limit = std::min(opt.max_micro_batch, batch);
  std::vector<std::vector<double>> fwd(g), bwd(g);
  for (int i = 0; i < g; ++i) {
    fwd[i].resize(mbs_limit + 1);
    bwd[i].resize(mbs_limit + 1);
    for (int m = 1; m <= mbs_limit; ++m) {
      fwd[i][m] = in.gpus[i].forward(m);
      bwd[i][m] = in.gpus[i].backward(m);
    }
  }

  // dp[i][j][k]: the smallest max T over the first i GPUs holding j samples whose micro-batch
  // sizes sum to k, with the last GPU's batch and micro-batch size for backtracking.
  struct Cell {
    double time = kInfinity;
    int batch = -1;
    int micro = -1;
  };
  const int w = batch + 1;
  std::vector<Cell> dp(static_cast<std::size_t>(g + 1) * w * w);
  auto at = [&](int i, int j, int k) -> Cell& {
    return dp[(static_cast<std::size_t>(i) * w + j) * w + k];
  };
  at(0, 0, 0) = {0.0, 0, 0};
  const double ag = in.all_gather_ms, rs = in.reduce_scatter_ms;
  for (int i = 1; i <= g; ++i) {
    const int es = sol.max_micro_batch_even_share[i - 1];
    const int max_fit = sol.max_micro_batch_no_state[i - 1];
    for (int j = 1; j <= batch; ++j) {
      for (int k = 1; k <= j; ++k) {
        Cell& cell = at(i, j, k);
        const int max_mbs = std::min({opt.max_micro_batch, max_fit, k});
        for (int m = 1; m <= max_mbs; ++m) {
          // Uneven sharding is assumed to cost 25% more communication.
          const double a = m > es ? 1.25 * ag : ag;
          const double r = m > es ? 1.25 * rs : rs;
          const double f1 = fwd[i - 1][m], b1 = bwd[i - 1][m];
          for (int n = 1; n <= j / m; ++n) {
            const Cell& prev = at(i - 1, j - n * m, k - m);
            if (prev.time == kInfinity) continue;
            const double f = n * f1;
            const double b = (n - 1) * opt.ga_overhead_ms + n * b1;
            const double t = std::max(a, f) + std::max(a + r, f + b);
            const double time = std::max(prev.time, t);
            if (time < cell.time) cell = {time, n * m, m};
          }
        }
      }
    }
  }

  // Among the DP's solutions (one per micro-batch-size sum), the best throughput whose total
  // memory is under the cap.
  double cap_total = 0;
  for (const auto& gpu : in.gpus) cap_total += gpu.capacity_gb;
  sol.memory_cap_gb = opt.usable_fraction * cap_total;
  double best_throughput = 0;
  double smallest_over = kInfinity;
  bool any_candidate = false;
  for (int s = 1; s <= batch; ++s) {
    std::vector<int> bs, ms;
    int cb = batch, cs = s;
    for (int i = g; i >= 1; --i) {
      const Cell& c = at(i, cb, cs);
      if (c.micro < 0) break;
      cb -= c.batch;
      cs -= c.micro;
      bs.push_back(c.batch);
      ms.push_back(c.micro);
    }
    if (static_cast<int>(bs.size()) < g) continue;
    any_candidate = true;
    std::reverse(bs.begin(), bs.end());
    std::reverse(ms.begin(), ms.end());
    const double time = at(g, batch, s).time;
    const double throughput = batch / time;
    double memory = 0;
    for (int i = 0; i < g; ++i)
      memory += cephalo_memory_gb(in.compute_memory_gb, ms[i], opt.comm_reserve_gb);
    memory += train_gb;
    if (!(memory < sol.memory_cap_gb)) {
      smallest_over = std::min(smallest_over, memory - sol.memory_cap_gb);
      continue;
    }
    if (throughput > best_throughput) {
      best_throughput = throughput;
      sol.batch = bs;
      sol.micro_batch = ms;
      sol.iteration_layer_ms = time;
      sol.memory_gb = memory;
    }
  }
  if (sol.batch.empty()) {
    std::ostringstream msg;
    if (!any_candidate) {
      msg << "cephalo: no assignment of " << batch
          << " samples fits: the GPUs' micro-batch limits are too small";
    } else {
      msg << "cephalo: nothing fits in memory: the best candidate needs "
          << format_bytes((smallest_over + sol.memory_cap_gb) * kGB) << " of the "
          << format_bytes(sol.memory_cap_gb * kGB) << " usable in total (shortfall "
          << format_bytes(smallest_over * kGB)
          << "); add GPU memory, or use a smaller model, sequence or global batch";
    }
    throw InfeasibleError(msg.str());
  }

  sol.micro_batches.resize(g);
  sol.layer_ms.resize(g);
  std::vector<double> base(g);
  for (int i = 0; i < g; ++i) {
    const int n = sol.batch[i] / sol.micro_batch[i];
    sol.micro_batches[i] = n;
    const int m = sol.micro_batch[i];
    const int es = sol.max_micro_batch_even_share[i];
    const double a = m > es ? 1.25 * ag : ag;
    const double r = m > es ? 1.25 * rs : rs;
    const double f = n * fwd[i][m];
    const double b = (n - 1) * opt.ga_overhead_ms + n * bwd[i][m];
    sol.layer_ms[i] = std::max(a, f) + std::max(a + r, f + b);
    // The memory the share split sees (see the header about the published argument mix-up).
    const int size_for_split = opt.published_share_memory
                                   ? (sol.batch[i] + (sol.batch[i] / n) - 1) / (sol.batch[i] / n)
                                   : m;
    base[i] = cephalo_memory_gb(in.compute_memory_gb, size_for_split, opt.comm_reserve_gb);
  }

  std::vector<double> params;
  switch (opt.share_objective) {
    case ShareObjective::MinParams:
      params = cephalo_split_min_params(in, opt, base);
      break;
    case ShareObjective::MinUtil:
      params = cephalo_split_min_util(in, opt, base);
      break;
    case ShareObjective::Even:
      params.assign(g, 1.0);
      break;
  }
  double sum = 0;
  for (double p : params) sum += p;
  sol.shares.resize(g);
  for (int i = 0; i < g; ++i) sol.shares[i] = params[i] / sum;
  return sol;
}

}  // namespace cephalo::planner
