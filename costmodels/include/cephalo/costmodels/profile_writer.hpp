#pragma once
// The writers of the two measurement formats, beside their readers: the project's profile
// format ("cephalo-profile", read by ProfileTables::load_own) and the nccl-tests-like
// collective sweep ("cephalo-collective-sweep", read by calibrate_comm). `cephalo profile`
// (backend::profile_model) fills these records; nothing else spells the formats' keys.
#include <string>
#include <vector>

#include "cephalo/core/dtype.hpp"
#include "cephalo/core/json_reader.hpp"
#include "cephalo/core/scenario.hpp"

namespace cephalo::costmodels {

struct MeasuredPoint {
  int micro_batch = 0;
  double forward_ms = 0, backward_ms = 0;
  double recompute_ms = -1;  // layers only (< 0: not written)
  int repeats = 0;
  double stddev_ms = 0;  // the largest of the point's timings
};

struct MeasuredRow {
  std::string model, gpu;
  int seq = 0;
  Dtype dtype = Dtype::FP32;
  std::vector<MeasuredPoint> layer, embedding, head;
  // The software stack that was measured (written as the row's "implementation"; the loader
  // reads it back as the row's label). The backend's profiler sets its own.
  Implementation implementation;
};

struct MeasuredOptimizer {
  std::string gpu;
  double parameters = 0, ms = 0;
};

struct MeasuredCopy {
  std::string direction;  // "d2h" or "h2d"
  double bytes = 0, ms = 0;
};

struct MeasuredCollective {
  std::string collective;  // "all_gather", "reduce_scatter"
  std::vector<int> ranks;
  double bytes = 0, time_us = 0, algbw_GBps = 0, busbw_GBps = 0;
  bool uneven = false;
  std::vector<double> shares;  // uneven points
  bool under_compute = false;
};

struct MeasuredProfile {
  std::string tool, date, host, source;
  std::vector<MeasuredRow> rows;
  std::vector<MeasuredOptimizer> optimizer;
  std::vector<MeasuredCopy> copies;
  std::vector<MeasuredCollective> collectives;
};

// The "cephalo-profile" record.
Json profile_to_json(const MeasuredProfile& profile);
// The "cephalo-collective-sweep" record of the profile's even collective points (empty
// results when there are none).
Json collective_sweep_to_json(const MeasuredProfile& profile, const std::string& device);
// The tables `cephalo profile` prints: the first row's layer, embedding and head times per
// micro-batch, the optimizer points and, when measured, the collectives.
std::string render_profile_tables(const MeasuredProfile& profile);

}  // namespace cephalo::costmodels
