// Fitting the alpha-beta model to measurements: reading a collective sweep, the per-link
// latency and efficiency fit, and the host-device copy fit from a profile.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/alpha_beta_comm.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "comm_topology.hpp"

namespace cephalo::costmodels {

using detail::ring_links;
using detail::RingLinks;
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
  // For each point the flat-ring model reads t − launch = steps·α + bytes_on_link / (η·B):
  // linear in (α, 1/η) once the bottleneck link kind and its nominal bandwidth are known.
  CommCalibration nominal;
  for (const char* k : {"pcie", "nvlink", "shm", "ethernet", "infiniband"})
    nominal.links[k] = {1.0, -1};
  nominal.launch_overhead_s = 0;
  Topology topo(cluster, nominal);
  // Per point: ring features (steps, bytes over the bottleneck / B) and, for all-reduce on more
  // than two ranks, tree features; which one NCCL ran is decided by the current fit (the model
  // takes the faster), so the fit alternates a few times.
  struct Row {
    std::array<double, 2> ring, tree;
    bool has_tree = false;
    double t = 0;
  };
  std::map<std::pair<bool, std::string>, std::vector<Row>> rows;  // (under compute, kind)
  for (const auto& p : points) {
    for (int r : p.ranks)
      if (r < 0 || r >= topo.size())
        throw ValidationError("", "ranks", std::to_string(r), "a rank of the scenario's cluster");
    std::vector<int> ranks = p.ranks;
    std::sort(ranks.begin(), ranks.end());
    const int n = static_cast<int>(ranks.size());
    if (n < 2) continue;
    RingLinks l = ring_links(topo, ranks);
    Row row;
    row.t = p.seconds;
    switch (p.kind) {
      case CollectiveKind::AllGather:
      case CollectiveKind::ReduceScatter:
        row.ring = {double(n - 1), (n - 1) * p.bytes / n / l.bandwidth};
        break;
      case CollectiveKind::AllReduce:
        row.ring = {2.0 * (n - 1), 2.0 * (n - 1) * p.bytes / n / l.bandwidth};
        if (n > 2) {
          row.has_tree = true;
          row.tree = {2 * std::ceil(std::log2(static_cast<double>(n))), 2 * p.bytes / l.bandwidth};
        }
        break;
      case CollectiveKind::Broadcast:
        row.ring = {double(n - 1), p.bytes / l.bandwidth};
        break;
    }
    rows[{p.under_compute, l.bottleneck_kind}].push_back(row);
  }
  CommCalibration out = AlphaBetaCommModel().calibration();
  out.launch_overhead_s = 0;  // absorbed into α by the fit
  const auto loaded = static_cast<std::size_t>(std::count_if(
      points.begin(), points.end(), [](const SweepPoint& p) { return p.under_compute; }));
  out.source = "fitted to " + std::to_string(points.size() - loaded) + " measured points";
  if (loaded > 0)
    out.source += " (+" + std::to_string(loaded) + " under compute load, fitted separately)";
  for (auto& [key, r] : rows) {
    const auto& [under_compute, kind] = key;
    if (r.size() < 2) continue;
    Eigen::Vector2d theta(10e-6, 1.0);  // α, 1/η: start from "ring everywhere"
    std::vector<bool> tree(r.size(), false);
    for (int iter = 0; iter < 6; ++iter) {
      Eigen::MatrixXd A(static_cast<Eigen::Index>(r.size()), 2);
      Eigen::VectorXd y(static_cast<Eigen::Index>(r.size()));
      for (std::size_t i = 0; i < r.size(); ++i) {
        const auto& f = tree[i] ? r[i].tree : r[i].ring;
        double w = 1.0 / r[i].t;  // relative errors: small and large sizes count alike
        A(static_cast<Eigen::Index>(i), 0) = f[0] * w;
        A(static_cast<Eigen::Index>(i), 1) = f[1] * w;
        y(static_cast<Eigen::Index>(i)) = 1.0;
      }
      theta = A.colPivHouseholderQr().solve(y);
      bool changed = false;
      for (std::size_t i = 0; i < r.size(); ++i) {
        if (!r[i].has_tree) continue;
        double ring = theta(0) * r[i].ring[0] + theta(1) * r[i].ring[1];
        double tr = theta(0) * r[i].tree[0] + theta(1) * r[i].tree[1];
        bool use_tree = tr < ring;
        changed |= use_tree != tree[i];
        tree[i] = use_tree;
      }
      if (!changed) break;
    }
    LinkCorrection c;
    c.latency_s = std::max(0.0, theta(0));
    c.bandwidth_efficiency = theta(1) > 0 ? std::min(1.0, 1.0 / theta(1)) : 1.0;
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
