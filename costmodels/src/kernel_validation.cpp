#include "kernel_validation.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <sstream>

#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/model_math.hpp"

namespace cephalo::costmodels {
namespace {

std::vector<std::vector<std::string>> read_csv(const std::filesystem::path& file) {
  // read_input_file: regular files only (a FIFO would block), and recorded as an input of the
  // command so that no output replaces it (core/output_file.hpp).
  std::istringstream in(read_input_file(file));
  std::vector<std::vector<std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    out.push_back(cells);
  }
  return out;
}

double number(const std::filesystem::path& file, std::size_t line, const std::string& cell) {
  try {
    std::size_t used = 0;
    double v = std::stod(cell, &used);
    if (used == cell.size() && std::isfinite(v)) return v;
  } catch (...) {
  }
  throw ValidationError(file.string(), "line " + std::to_string(line + 1), "\"" + cell + "\"",
                        "a number");
}

bool is_gemm(const std::string& op) { return op == "linear" || op == "bmm"; }

constexpr std::size_t kF = 3;
using Features = std::array<double, kF>;

Features features(const KernelRow& r, const KernelDevice& d, bool waves) {
  Features x{0, 0, 1e-6};
  if (is_gemm(r.op)) {
    const double flops = 2 * r.b * r.m * r.n * r.k;
    const double bytes = r.op == "linear" ? 4 * (r.b * r.m * r.k + r.k * r.n + r.b * r.m * r.n)
                                          : 4 * r.b * (r.m * r.k + r.k * r.n + r.m * r.n);
    const double tiles =
        r.op == "linear" ? output_tiles(r.b * r.m, r.n) : output_tiles(r.m, r.n, r.b);
    const double w = waves ? wave_efficiency(tiles, d.sm_count) : 1.0;
    x[0] = flops / (d.peak_fp32 * w);
    x[1] = bytes / d.bandwidth;
  } else {
    const double passes = (r.op == "add" || r.op == "mul") ? 3 : 2;
    x[1] = 4 * r.b * r.m * passes / d.bandwidth;
  }
  return x;
}

// Non-negative least squares on relative error: Σ (θ·x_i / t_i − 1)², active set.
Features fit(const std::vector<std::pair<Features, double>>& pts) {
  std::array<bool, kF> active{true, true, true};
  Features theta{};
  for (int iter = 0; iter < 4; ++iter) {
    std::vector<std::size_t> cols;
    for (std::size_t k = 0; k < kF; ++k)
      if (active[k]) cols.push_back(k);
    if (cols.empty()) break;
    Eigen::MatrixXd A(static_cast<Eigen::Index>(pts.size()),
                      static_cast<Eigen::Index>(cols.size()));
    Eigen::VectorXd y = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(pts.size()));
    for (std::size_t i = 0; i < pts.size(); ++i)
      for (std::size_t c = 0; c < cols.size(); ++c)
        A(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(c)) =
            pts[i].first[cols[c]] / pts[i].second;
    Eigen::VectorXd sol = A.colPivHouseholderQr().solve(y);
    bool negative = false;
    theta.fill(0);
    for (std::size_t c = 0; c < cols.size(); ++c) {
      if (sol(static_cast<Eigen::Index>(c)) < 0) {
        active[cols[c]] = false;
        negative = true;
      } else {
        theta[cols[c]] = sol(static_cast<Eigen::Index>(c));
      }
    }
    if (!negative) break;
  }
  return theta;
}

double predict(const Features& t, const Features& x) {
  return t[0] * x[0] + t[1] * x[1] + t[2] * x[2];
}

}  // namespace

const KernelDevice& KernelSet::device(const std::string& name) const {
  for (const auto& d : devices)
    if (d.name == name) return d;
  throw NotFoundError("kernel-set GPU", name, {});
}

KernelSet load_kernel_set(const std::filesystem::path& dir) {
  KernelSet set;
  const auto dev_file = dir / "devices.csv";
  auto dev = read_csv(dev_file);
  for (std::size_t i = 1; i < dev.size(); ++i) {
    const auto& c = dev[i];
    if (c.size() != 7)
      throw ValidationError(dev_file.string(), "line " + std::to_string(i + 1),
                            std::to_string(c.size()) + " cells",
                            "gpu,architecture,sm_count,clock_mhz,memory_bandwidth_GBps,"
                            "peak_fp32_GFLOPS,l2_MB");
    KernelDevice d;
    d.name = c[0];
    d.architecture = c[1];
    d.sm_count = static_cast<int>(number(dev_file, i, c[2]));
    d.bandwidth = number(dev_file, i, c[4]) * 1e9;
    d.peak_fp32 = number(dev_file, i, c[5]) * 1e9;
    set.devices.push_back(d);
  }
  const auto file = dir / "kernels.csv";
  auto rows = read_csv(file);
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const auto& c = rows[i];
    if (c.size() != 7)
      throw ValidationError(file.string(), "line " + std::to_string(i + 1),
                            std::to_string(c.size()) + " cells", "op,gpu,B,M_or_H,N,K,latency_ms");
    KernelRow r;
    r.op = c[0];
    r.gpu = c[1];
    set.device(r.gpu);
    r.b = number(file, i, c[2]);
    r.m = number(file, i, c[3]);
    if (is_gemm(r.op)) {
      r.n = number(file, i, c[4]);
      r.k = number(file, i, c[5]);
    }
    r.ms = number(file, i, c[6]);
    set.rows.push_back(r);
  }
  return set;
}

KernelReport validate_kernels(const KernelSet& set, bool waves) {
  KernelReport rep;
  std::vector<Features> x;
  for (const auto& r : set.rows) {
    x.push_back(features(r, set.device(r.gpu), waves));
    rep.rows[r.op]++;
  }
  auto cls = [](const KernelRow& r) { return is_gemm(r.op) ? 0 : 1; };
  // θ per op class from the rows `use` admits; errors on the rows `judge` admits.
  auto run = [&](const std::string& protocol, auto train_of) {
    std::map<std::string, std::pair<double, int>> by_op, by_gpu;
    // One fit per (class, held-out key) — the key is the GPU or the generation, or "" in-sample
    // per GPU (each GPU its own θ).
    std::map<std::pair<int, std::string>, Features> fitted;
    for (std::size_t i = 0; i < set.rows.size(); ++i) {
      const auto& r = set.rows[i];
      const std::string key = train_of(r, nullptr);
      auto f = fitted.find({cls(r), key});
      if (f == fitted.end()) {
        std::vector<std::pair<Features, double>> pts;
        for (std::size_t j = 0; j < set.rows.size(); ++j)
          if (cls(set.rows[j]) == cls(r) && train_of(r, &set.rows[j]) == "use")
            pts.push_back({x[j], set.rows[j].ms * 1e-3});
        f = fitted.emplace(std::make_pair(cls(r), key), fit(pts)).first;
      }
      const double e = std::abs(predict(f->second, x[i]) / (r.ms * 1e-3) - 1) * 100;
      by_op[r.op].first += e;
      by_op[r.op].second += 1;
      by_gpu[r.gpu].first += e;
      by_gpu[r.gpu].second += 1;
    }
    for (auto& [op, a] : by_op) rep.mape[op][protocol] = a.first / a.second;
    for (auto& [g, a] : by_gpu) rep.mape_by_gpu[protocol][g] = a.first / a.second;
  };
  // train_of(judged row, candidate): with a candidate, "use" when it may train the judged
  // row's model; without, the key of that model.
  run("in-sample", [](const KernelRow& r, const KernelRow* c) {
    return c ? (c->gpu == r.gpu ? "use" : "") : r.gpu;
  });
  run("leave-one-GPU-out", [](const KernelRow& r, const KernelRow* c) {
    return c ? (c->gpu != r.gpu ? "use" : "") : r.gpu;
  });
  run("leave-one-generation-out", [&](const KernelRow& r, const KernelRow* c) {
    const auto& ga = set.device(r.gpu).architecture;
    return c ? (set.device(c->gpu).architecture != ga ? "use" : "") : ga;
  });
  return rep;
}

LayerModelKernelReport price_kernels_with_layer_model(const KernelSet& set,
                                                      const CalibratedComputeModel& model) {
  // Same silicon, same datasheet rates: the PCIe A100 and the SXM4 one share 108 SMs at
  // 1410 MHz, 1555 GB/s and 19.5 TFLOP/s fp32 (the catalog's A100-40GB is the SXM4 part; its
  // 400 W board power caps only the tensor pipeline); the 32 GB and 16 GB PCIe V100s differ
  // only in memory size.
  const std::map<std::string, std::string> same_chip = {{"A100-PCIE-40GB", "A100-40GB"},
                                                        {"V100-PCIE-32GB", "V100-PCIe-16GB"},
                                                        {"P100-PCIE-16GB", "P100"},
                                                        {"T4", "T4"}};
  LayerModelKernelReport rep;
  std::map<std::string, std::vector<double>> signed_by_op;
  std::map<std::string, std::pair<double, int>> by_op, by_gpu;
  std::map<std::string, std::map<std::string, std::pair<double, int>>> by_gpu_op;
  double total = 0;
  for (const auto& d : set.devices) {
    auto it = same_chip.find(d.name);
    if (it == same_chip.end() || !GpuCatalog::builtin().find(it->second)) {
      rep.skipped_gpus.push_back(d.name);
      continue;
    }
    rep.catalog_gpu[d.name] = it->second;
  }
  for (const auto& r : set.rows) {
    auto name = rep.catalog_gpu.find(r.gpu);
    if (name == rep.catalog_gpu.end()) continue;
    const DeviceSpec& gpu = GpuCatalog::builtin().get(name->second);
    OpCost op{"kernel", OpClass::Memory};
    if (is_gemm(r.op)) {
      const bool linear = r.op == "linear";
      op.op_class = linear ? OpClass::Gemm : OpClass::Attention;
      op.forward_flops = 2 * r.b * r.m * r.n * r.k;
      op.forward_bytes = linear ? 4 * (r.b * r.m * r.k + r.k * r.n + r.b * r.m * r.n)
                                : 4 * r.b * (r.m * r.k + r.k * r.n + r.m * r.n);
      op.tiles = linear ? output_tiles(r.b * r.m, r.n) : output_tiles(r.m, r.n, r.b);
    } else {
      // As unit_ops writes these kernels: two passes (read, write), three for a binary op.
      const double passes = (r.op == "add" || r.op == "mul") ? 3 : 2;
      const double flops_per = r.op == "gelu" ? 8 : (r.op == "ln" || r.op == "softmax") ? 5 : 1;
      op.forward_flops = flops_per * r.b * r.m;
      op.forward_bytes = 4 * r.b * r.m * passes;
    }
    const double t = model.ops_seconds(gpu, Dtype::FP32, {op}, false);
    const double rel = (t / (r.ms * 1e-3) - 1) * 100;
    const double e = std::abs(rel);
    signed_by_op[r.op].push_back(rel);
    by_op[r.op].first += e;
    by_op[r.op].second += 1;
    by_gpu[r.gpu].first += e;
    by_gpu[r.gpu].second += 1;
    by_gpu_op[r.gpu][r.op].first += e;
    by_gpu_op[r.gpu][r.op].second += 1;
    total += e;
    ++rep.rows;
  }
  for (auto& [op, a] : by_op) rep.mape_by_op[op] = a.first / a.second;
  for (auto& [g, a] : by_gpu) rep.mape_by_gpu[g] = a.first / a.second;
  for (auto& [g, ops] : by_gpu_op)
    for (auto& [op, a] : ops) rep.mape_by_gpu_op[g][op] = a.first / a.second;
  for (auto& [op, v] : signed_by_op) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    rep.median_signed_by_op[op] = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
  rep.mape = rep.rows ? total / rep.rows : 0;
  return rep;
}

}  // namespace cephalo::costmodels
