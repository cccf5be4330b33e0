// The comm model fitted on a collective sweep: link efficiency and latency recovered, the
// under-compute fit kept for flagged requests, copies timed from the sweep's own set, and the
// uneven points of a measured MPI sweep predicted as well as the even ones.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "alpha_beta_comm.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/costmodels/analytic_compute.hpp"
#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/costmodels/cost_models.hpp"
#include "cephalo/costmodels/model_math.hpp"
#include "cephalo/costmodels/profile.hpp"
#include "profile_compute.hpp"
#include "published_throughput.hpp"

using namespace cephalo;
using namespace cephalo::costmodels;

namespace {
const std::filesystem::path kScenarios = std::filesystem::path(CEPHALO_SOURCE_DIR) / "scenarios";
}

TEST(CommCalibration, RecoversLinkEfficiencyAndLatencyFromASweep) {
  Scenario s = load_scenario(kScenarios / "default.json");  // one PCIe node, 4 GPUs
  CommCalibration truth;
  truth.links["pcie"] = {0.6, 20e-6};
  truth.launch_overhead_s = 0;
  AlphaBetaCommModel model(truth);
  auto dir =
      std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_cephalo_sweep_test");
  std::filesystem::create_directories(dir);
  Json sweep = {{"format", "cephalo-collective-sweep"}, {"version", 1}, {"results", Json::array()}};
  for (auto kind : {CollectiveKind::AllGather, CollectiveKind::AllReduce})
    for (double bytes = 1 << 16; bytes <= (1 << 28); bytes *= 4) {
      CollectiveRequest r;
      r.kind = kind;
      r.ranks = {0, 1, 2, 3};
      r.shard_bytes.assign(4, bytes / 4);
      auto e = model.collective(s.cluster, r);
      sweep["results"].push_back({{"collective", to_string(kind)},
                                  {"ranks", r.ranks},
                                  {"bytes", bytes},
                                  {"time_us", e.seconds * 1e6}});
    }
  std::ofstream(dir / "sweep.json") << sweep.dump(1);
  auto points = load_collective_sweep(dir / "sweep.json");
  CommCalibration fitted = calibrate_comm(s.cluster, points);
  EXPECT_NEAR(fitted.links["pcie"].bandwidth_efficiency, 0.6, 1e-6);
  EXPECT_NEAR(fitted.links["pcie"].latency_s, 20e-6, 1e-9);
  // Through the factory: a scenario listing the sweep gets the calibrated links.
  s.calibration.push_back(dir / "sweep.json");
  auto models = make_cost_models(s, "roofline");
  CollectiveRequest r;
  r.kind = CollectiveKind::AllGather;
  r.ranks = {0, 1, 2, 3};
  r.shard_bytes.assign(4, 1e7);
  EXPECT_NEAR(models.comm->collective(s.cluster, r).seconds, model.collective(s.cluster, r).seconds,
              1e-9);
  std::ofstream(dir / "bad.json") << R"({"format": "cephalo-collective-sweep", "version": 1,
    "results": [{"collective": "all_gather", "ranks": [0, 1], "bytes": 1024, "time_us": -3}]})";
  EXPECT_THROW(load_collective_sweep(dir / "bad.json"), ValidationError);
  std::filesystem::remove_all(dir);
}

// Points measured under compute load ("under_compute": true) are fitted separately; the model
// uses that fit only for requests flagged overlaps_compute, and a sweep without such points
// (every file written before the field existed) leaves flagged requests as they were.

// Points measured under compute load ("under_compute": true) are fitted separately; the model
// uses that fit only for requests flagged overlaps_compute, and a sweep without such points
// (every file written before the field existed) leaves flagged requests as they were.
TEST(CommCalibration, UnderComputeFitIsUsedOnlyForFlaggedRequests) {
  Scenario s = load_scenario(kScenarios / "default.json");  // one PCIe node, 4 GPUs
  CommCalibration idle, loaded;
  idle.links["pcie"] = {0.6, 20e-6};
  loaded.links["pcie"] = {0.3, 50e-6};
  idle.launch_overhead_s = loaded.launch_overhead_s = 0;
  auto dir = std::filesystem::temp_directory_path() /
             (std::to_string(::getpid()) + "_cephalo_sweep_load_test");
  std::filesystem::create_directories(dir);
  Json old_sweep = {
      {"format", "cephalo-collective-sweep"}, {"version", 1}, {"results", Json::array()}};
  Json sweep = old_sweep;
  for (bool under : {false, true})
    for (auto kind : {CollectiveKind::AllGather, CollectiveKind::ReduceScatter})
      for (double bytes = 1 << 16; bytes <= (1 << 26); bytes *= 4) {
        CollectiveRequest r;
        r.kind = kind;
        r.ranks = {0, 1, 2, 3};
        r.shard_bytes.assign(4, bytes / 4);
        auto e = AlphaBetaCommModel(under ? loaded : idle).collective(s.cluster, r);
        Json p = {{"collective", to_string(kind)},
                  {"ranks", r.ranks},
                  {"bytes", bytes},
                  {"time_us", e.seconds * 1e6}};
        if (under) p["under_compute"] = true;
        sweep["results"].push_back(p);
        if (!under) old_sweep["results"].push_back(p);
      }
  std::ofstream(dir / "sweep.json") << sweep.dump(1);
  std::ofstream(dir / "old.json") << old_sweep.dump(1);
  auto points = load_collective_sweep(dir / "sweep.json");
  ASSERT_EQ(points.size(), 2 * 2 * 6u);
  EXPECT_FALSE(points.front().under_compute);
  EXPECT_TRUE(points.back().under_compute);
  CommCalibration fitted = calibrate_comm(s.cluster, points);
  EXPECT_NEAR(fitted.links["pcie"].bandwidth_efficiency, 0.6, 1e-6);
  EXPECT_NEAR(fitted.links["pcie"].latency_s, 20e-6, 1e-9);
  ASSERT_TRUE(fitted.links_under_compute.count("pcie"));
  EXPECT_NEAR(fitted.links_under_compute["pcie"].bandwidth_efficiency, 0.3, 1e-6);
  EXPECT_NEAR(fitted.links_under_compute["pcie"].latency_s, 50e-6, 1e-9);

  CollectiveRequest r;
  r.kind = CollectiveKind::AllGather;
  r.ranks = {0, 1, 2, 3};
  r.shard_bytes.assign(4, 1e7);
  CollectiveRequest flagged = r;
  flagged.overlaps_compute = true;
  const double t_idle = AlphaBetaCommModel(idle).collective(s.cluster, r).seconds;
  const double t_loaded = AlphaBetaCommModel(loaded).collective(s.cluster, r).seconds;
  ASSERT_GT(t_loaded, 1.5 * t_idle);
  s.calibration.push_back(dir / "sweep.json");
  auto models = make_cost_models(s, "roofline");
  EXPECT_NEAR(models.comm->collective(s.cluster, r).seconds, t_idle, 1e-9);
  EXPECT_NEAR(models.comm->collective(s.cluster, flagged).seconds, t_loaded, 1e-9);
  // An old sweep (no under-load points): the flag changes nothing.
  s.calibration.back() = dir / "old.json";
  auto old_models = make_cost_models(s, "roofline");
  EXPECT_DOUBLE_EQ(old_models.comm->collective(s.cluster, flagged).seconds,
                   old_models.comm->collective(s.cluster, r).seconds);
  EXPECT_NEAR(old_models.comm->collective(s.cluster, r).seconds, t_idle, 1e-9);
  // Uncalibrated (published defaults): unaffected too.
  AlphaBetaCommModel defaults;
  EXPECT_DOUBLE_EQ(defaults.collective(s.cluster, flagged).seconds,
                   defaults.collective(s.cluster, r).seconds);
  // The field must be a boolean; unknown keys are still rejected.
  std::ofstream(dir / "bad.json") << R"({"format": "cephalo-collective-sweep", "version": 1,
    "results": [{"collective": "all_gather", "ranks": [0, 1], "bytes": 1024, "time_us": 3,
                 "under_compute": "yes"}]})";
  EXPECT_THROW(load_collective_sweep(dir / "bad.json"), ValidationError);
  std::ofstream(dir / "bad2.json") << R"({"format": "cephalo-collective-sweep", "version": 1,
    "results": [{"collective": "all_gather", "ranks": [0, 1], "bytes": 1024, "time_us": 3,
                 "under_load": true}]})";
  EXPECT_THROW(load_collective_sweep(dir / "bad2.json"), ValidationError);
  std::filesystem::remove_all(dir);
}

TEST(CommCalibration, CopiesFromAnOwnProfileSetCopyTime) {
  Scenario s = load_scenario(kScenarios / "default.json");
  auto dir = std::filesystem::temp_directory_path() /
             (std::to_string(::getpid()) + "_cephalo_copies_test");
  std::filesystem::create_directories(dir);
  // 50 µs + bytes / 10 GB/s, both directions.
  Json copies = Json::array();
  for (double bytes = 1 << 16; bytes <= (1 << 26); bytes *= 4)
    for (const char* d : {"d2h", "h2d"})
      copies.push_back({{"direction", d}, {"bytes", bytes}, {"ms", (50e-6 + bytes / 10e9) * 1e3}});
  Json profile = {
      {"format", "cephalo-profile"},
      {"version", 1},
      {"rows",
       Json::array(
           {{{"model", "gpt-2.7b"},
             {"gpu", "l4"},
             {"seq", 512},
             {"dtype", "fp16"},
             {"layer",
              Json::array({{{"micro_batch", 1}, {"forward_ms", 9.0}, {"backward_ms", 14.0}}})}}})},
      {"copies", copies}};
  std::ofstream(dir / "profile.json") << profile.dump(1);
  s.calibration.push_back(dir / "profile.json");
  auto models = make_cost_models(s);
  EXPECT_NEAR(models.comm->copy_time(s.cluster, 0, 1e8), 50e-6 + 1e8 / 10e9, 1e-9);  // an L4
  // The A6000 (rank 2) was not profiled: the PCIe default.
  EXPECT_GT(models.comm->copy_time(s.cluster, 2, 1e8), 0);
  EXPECT_NE(models.comm->copy_time(s.cluster, 2, 1e8), models.comm->copy_time(s.cluster, 0, 1e8));
  // The profile's layer row (seq 512, fp16, one point) now answers for the L4.
  const DeviceSpec& l4 = s.cluster.ranks()[0].slot->spec;
  EXPECT_NEAR(models.compute->unit_time(l4, s.job, 1, ComputePhase::Forward, 1).seconds, 9e-3,
              1e-12);
  std::filesystem::remove_all(dir);
}

// Against a sweep `mpirun -np 2 cephalo profile` measured (two CPU ranks over shared memory; the
// profile's "collectives", shipped as a fuzz seed): the comm model calibrated from the even
// idle points predicts the uneven ones (shares 1/3, 2/3, the -v calls) about as well as the even
// ones, and its uneven price stays between the even collective's and the even one on the padded
// size, whichever variant it picks.
TEST(CommModel, PredictsTheUnevenPointsOfAMeasuredMpiSweepAsWellAsTheEvenOnes) {
  const Scenario s = load_scenario(kScenarios / "cpu-2rank.json");
  const Json profile = read_json_file(std::filesystem::path(CEPHALO_SOURCE_DIR) /
                                      "tests/fuzz/seeds/cephalo-profile.json");
  std::vector<SweepPoint> even;
  for (const Json& p : profile.at("collectives"))
    if (!p.at("uneven").get<bool>() && !p.value("under_compute", false))
      even.push_back({parse_collective_kind(p.at("collective").get<std::string>()),
                      p.at("ranks").get<std::vector<int>>(), p.at("bytes").get<double>(),
                      p.at("time_us").get<double>() * 1e-6, false});
  ASSERT_EQ(even.size(), 6u);
  const AlphaBetaCommModel model(calibrate_comm(s.cluster, even));
  std::vector<double> even_err, uneven_err;
  for (const Json& p : profile.at("collectives")) {
    if (p.value("under_compute", false)) continue;
    CollectiveRequest r;
    r.kind = parse_collective_kind(p.at("collective").get<std::string>());
    r.ranks = p.at("ranks").get<std::vector<int>>();
    const double bytes = p.at("bytes").get<double>();
    const bool uneven = p.at("uneven").get<bool>();
    std::vector<double> shares = {0.5, 0.5};
    if (uneven) shares = p.at("shares").get<std::vector<double>>();
    for (double x : shares) r.shard_bytes.push_back(x * bytes);
    const CollectiveEstimate e = model.collective(s.cluster, r);
    const double measured = p.at("time_us").get<double>() * 1e-6;
    (uneven ? uneven_err : even_err).push_back(std::abs(std::log(e.seconds / measured)));
    if (!uneven) continue;
    CollectiveRequest flat = r;
    flat.shard_bytes.assign(2, bytes / 2);
    const double lo = model.collective(s.cluster, flat).seconds;
    flat.shard_bytes.assign(2, *std::max_element(r.shard_bytes.begin(), r.shard_bytes.end()));
    const double hi = model.collective(s.cluster, flat).seconds;
    EXPECT_GE(e.seconds, lo * (1 - 1e-12)) << bytes;
    EXPECT_LE(e.seconds, hi * (1 + 1e-12)) << bytes;
  }
  ASSERT_EQ(uneven_err.size(), 6u);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return 0.5 * (v[(v.size() - 1) / 2] + v[v.size() / 2]);
  };
  // Within a factor 1.5 of the even points' median log error (the sweep's own noise: uneven
  // points were measured faster than even ones at 4 KiB).
  EXPECT_LE(median(uneven_err), median(even_err) + std::log(1.5))
      << "median |log(pred/measured)|: even " << median(even_err) << ", uneven "
      << median(uneven_err);
}

// A job naming a Hugging Face config computes in its torch_dtype unless the job says
// otherwise; Mistral's sliding window is priced, so a sequence past it is accepted and its
// flash attention costs the window, not the whole causal triangle.
