// Fitting the alpha-beta model to measurements: reading a collective sweep, the per-link
// latency and efficiency fit, and the host-device copy fit from a profile.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

#include "alpha_beta_comm.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "comm_topology.hpp"

namespace cephalo::costmodels {

using detail::ring_links;
using detail::Topology;

std::vector<SweepPoint> load_collective_sweep(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  JsonReader root(j, file.string());
  root.allow({"_comment", "cluster", "date", "tool", "device"});
  std::string format = root.string("format");
  if (format != "cephalo-collective-sweep")
    root.child("format").fail("\"cephalo-collective-sweep\"");
  root.integer("version", 1, 1);
  std::vector<SweepPoint> points;
  for (auto& r : root.child("results").elements()) {
    r.allow({"algbw_GBps", "busbw_GBps", "algorithm", "in_place"});
    SweepPoint p;
    p.under_compute = r.boolean_or("under_compute", false);
    p.kind = parse_collective_kind(r.string("collective"));
    for (auto& x : r.child("ranks").elements())
      p.ranks.push_back(static_cast<int>(x.as_integer(0, 1 << 20)));
    if (p.ranks.empty()) r.child("ranks").fail("a non-empty list of ranks");
    p.bytes = r.quantity("bytes", Quantity::Bytes);
    if (p.bytes <= 0) r.child("bytes").fail("a size > 0");
    double us = r.number("time_us");
    if (!(us > 0)) r.child("time_us").fail("a time > 0 in microseconds");
    p.seconds = us * 1e-6;
    r.finish();
    points.push_back(p);
  }
  if (points.empty()) root.child("results").fail("at least one measured point");
  root.finish();
  return points;
}

CommCalibration calibrate_comm(const Cluster& cluster, const std::vector<SweepPoint>& points) {
  // The fit prices each point with the model itself (AlphaBetaCommModel: NCCL's algorithm,
  // protocol and channels as its chooser picks them), so what is fitted is what is later
  // priced. Points are grouped by the link kind that bounds their ring (and by whether they were
  // measured under compute load); per group, the kind's α and 1/η are found by Gauss-Newton on
  // relative error: the model is affine in (α, 1/η) for a fixed choice, so each step solves the
  // linearised least squares and the choice is re-made at the new estimate.
  CommCalibration nominal;
  for (const char* k : {"pcie", "nvlink", "shm", "ethernet", "infiniband"})
    nominal.links[k] = {1.0, -1};
  nominal.launch_overhead_s = 0;
  Topology topo(cluster, nominal);
  // Group key: (under load, link kind, the collective kind). Every point is in its link kind's
  // group; a point on CPU ranks alone is also in its collective kind's, whose fit is priced
  // first (the link kind's stays for kinds the sweep did not measure often enough).
  using GroupKey = std::tuple<bool, std::string, std::optional<CollectiveKind>>;
  std::map<GroupKey, std::vector<const SweepPoint*>> groups;
  for (const auto& p : points) {
    for (int r : p.ranks)
      if (r < 0 || r >= topo.size())
        throw ValidationError("", "ranks", std::to_string(r), "a rank of the scenario's cluster");
    std::vector<int> ranks = p.ranks;
    std::sort(ranks.begin(), ranks.end());
    if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end())
      throw ValidationError("", "ranks",
                            std::to_string(*std::adjacent_find(ranks.begin(), ranks.end())),
                            "each rank at most once");
    if (ranks.size() < 2) continue;
    const bool host = std::all_of(ranks.begin(), ranks.end(),
                                  [&](int r) { return topo.rank(r).slot->spec.kind == "cpu"; });
    const std::string link = ring_links(topo, ranks).bottleneck_kind;
    groups[{p.under_compute, link, std::nullopt}].push_back(&p);
    if (host) groups[{p.under_compute, link, p.kind}].push_back(&p);
  }
  CommCalibration out = AlphaBetaCommModel().calibration();
  out.launch_overhead_s = 0;  // absorbed into α by the fit
  const auto loaded = static_cast<std::size_t>(std::count_if(
      points.begin(), points.end(), [](const SweepPoint& p) { return p.under_compute; }));
  out.source = "fitted to " + std::to_string(points.size() - loaded) + " measured points";
  if (loaded > 0)
    out.source += " (+" + std::to_string(loaded) + " under compute load, fitted separately)";
  const CommCalibration base = out;
  for (const auto& [key, group] : groups) {
    // Not a structured binding: the lambda below captures the kind (clang 14 cannot capture one).
    const bool under_compute = std::get<0>(key);
    const auto kind = std::get<1>(key);
    const auto collective = std::get<2>(key);
    if (group.size() < 2) continue;
    auto seconds = [&](double alpha, double inv_eta, const SweepPoint& p) {
      CommCalibration c = base;
      const LinkCorrection trial{1.0 / inv_eta, std::max(0.0, alpha)};
      if (collective)
        c.host_links[{kind, *collective}] = trial;
      else
        c.links[kind] = trial;
      CollectiveRequest r;
      r.kind = p.kind;
      r.ranks = p.ranks;
      r.shard_bytes.assign(p.ranks.size(), p.bytes / static_cast<double>(p.ranks.size()));
      return AlphaBetaCommModel(c).collective(cluster, r).seconds;
    };
    Eigen::Vector2d theta(10e-6, 1.0);  // α, 1/η
    const auto n = static_cast<Eigen::Index>(group.size());
    for (int iter = 0; iter < 30; ++iter) {
      Eigen::MatrixXd A(n, 2);
      Eigen::VectorXd y(n);
      for (Eigen::Index i = 0; i < n; ++i) {
        const SweepPoint& p = *group[static_cast<std::size_t>(i)];
        const double t0 = seconds(theta(0), theta(1), p);
        const double da = std::max(1e-9, 1e-3 * theta(0)), db = 1e-3 * theta(1);
        const double fa = (seconds(theta(0) + da, theta(1), p) - t0) / da;
        const double fb = (seconds(theta(0), theta(1) + db, p) - t0) / db;
        const double w = 1.0 / p.seconds;  // relative errors: small and large sizes count alike
        A(i, 0) = fa * w;
        A(i, 1) = fb * w;
        y(i) = (p.seconds - t0 + fa * theta(0) + fb * theta(1)) * w;
      }
      Eigen::Vector2d next = A.colPivHouseholderQr().solve(y);
      if (!next.allFinite()) break;
      next(0) = std::max(0.0, next(0));
      next(1) = std::max(1e-3, next(1));
      const bool converged = std::abs(next(0) - theta(0)) <= 1e-12 + 1e-9 * theta(0) &&
                             std::abs(next(1) - theta(1)) <= 1e-9 * theta(1);
      theta = next;
      if (converged) break;
    }
    LinkCorrection c;
    c.latency_s = std::max(0.0, theta(0));
    c.bandwidth_efficiency = std::min(1.0, 1.0 / theta(1));
    if (collective)
      (under_compute ? out.host_links_under_compute : out.host_links)[{kind, *collective}] = c;
    else
      (under_compute ? out.links_under_compute : out.links)[kind] = c;
  }
  return out;
}

std::pair<std::string, CopyFit> fit_profile_copies(const std::filesystem::path& file) {
  Json j = read_json_file(file);
  JsonReader root(j, file.string());
  CopyFit fit;
  if (!root.is_object() || !root.has("copies") || !root.has("rows")) return {"", fit};
  JsonReader rows = root.child("rows");
  if (!rows.is_array() || rows.size() == 0) return {"", fit};
  std::string gpu_name = rows.element(0).child("gpu").as_string();
  auto gpu = GpuCatalog::builtin().find(gpu_name);
  if (!gpu) throw NotFoundError("GPU", gpu_name, GpuCatalog::builtin().names());
  std::vector<std::pair<double, double>> pts;  // (bytes, seconds)
  for (auto& c : root.child("copies").elements()) {
    c.child("direction").as_enum({"d2h", "h2d"});
    double bytes = c.quantity("bytes", Quantity::Bytes);
    double ms = c.number("ms");
    if (!(ms > 0)) c.child("ms").fail("a time > 0 ms");
    c.allow({"repeats", "stddev_ms"});
    c.finish();
    if (bytes > 0) pts.push_back({bytes, ms * 1e-3});
  }
  if (pts.size() < 2) return {gpu->name, fit};
  Eigen::MatrixXd A(static_cast<Eigen::Index>(pts.size()), 2);
  Eigen::VectorXd y(static_cast<Eigen::Index>(pts.size()));
  for (std::size_t i = 0; i < pts.size(); ++i) {
    double w = 1.0 / pts[i].second;
    A(static_cast<Eigen::Index>(i), 0) = w;
    A(static_cast<Eigen::Index>(i), 1) = pts[i].first * w;
    y(static_cast<Eigen::Index>(i)) = 1.0;
  }
  Eigen::Vector2d x = A.colPivHouseholderQr().solve(y);
  if (x(1) <= 0) return {gpu->name, fit};
  fit.latency_s = std::max(0.0, x(0));
  fit.bandwidth = 1.0 / x(1);
  fit.points = static_cast<int>(pts.size());
  return {gpu->name, fit};
}

}  // namespace cephalo::costmodels
