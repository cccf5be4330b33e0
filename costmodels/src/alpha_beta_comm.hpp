#pragma once
// Collectives on a modelled cluster with α-β links, run as NCCL runs them.
//
// Each link is the cluster's (intra-node: NVLink, or PCIe capped by each GPU's own slot;
// between nodes: the node's NICs, `nic.count` rails of `bandwidth` each), corrected by the
// calibration (achieved fraction of nominal bandwidth, per-step α). How a collective runs is
// decided in one place, costmodels/src/nccl_tuning.hpp: NCCL's algorithms as a table of rows
// (ring, tree, PAT, NVLS, CollNet, each where the hardware has it), its protocols (LL, LL128,
// Simple) and channels by message size, the lowest predicted time taken, as NCCL's tuner does;
// CPU ranks run the backend's MPI ring or tree with no protocol. A ring spanning nodes crosses
// each node's NICs once per channel, so its inter-node link carries (n−1)/n of an all-gather's
// buffer (costmodels/README.md, "Collectives as NCCL runs them").
// Uneven shards (all-gather-v / reduce-scatter-v, Plan.uneven_collective), both priced by the
// same chooser:
//   padded             every shard padded to the largest, then the even collective on
//                      largest × n bytes: what FSDP runs on a unit whose size does not divide
//                      the ranks; shares that differ by one element cost what the even
//                      collective costs
//   grouped            one ring broadcast (reduce) per owner, issued as one NCCL group: the
//                      ring link into rank j carries every shard but its own, (S − s_j) / B,
//                      plus one enqueue per owner
//   auto               the cheaper of the two (uneven_variant(), comm_model.hpp)
// The estimate says which algorithm, protocol and channel count won.
#include <map>
#include <string>

#include "cephalo/costmodels/comm_model.hpp"

namespace cephalo::costmodels {

// Corrections fitted from measured sweeps (nccl-tests-like records), per link kind
// ("pcie", "nvlink", "ethernet", "infiniband", "shm"): achieved fraction of the link's
// nominal bandwidth and the per-step latency. Defaults: NCCL reaches ~80% of PCIe/NVLink and
// ~90% of a NIC's line rate; the latency is the link's own α.
struct LinkCorrection {
  double bandwidth_efficiency = 0.8;
  double latency_s = -1;  // < 0: use the link's α
};

// Host<->device copies measured on one device type: time = latency + bytes / bandwidth.
struct CopyFit {
  double latency_s = 0;
  double bandwidth = 0;  // bytes/s
  int points = 0;
};

struct CommCalibration {
  std::map<std::string, LinkCorrection> links;  // by link kind
  // Fitted to points measured while every participant's compute stream was busy ("under
  // compute load"); used for collectives with CollectiveRequest::overlaps_compute, per link
  // kind, when the kind has such a fit. Empty unless a sweep had under-load points.
  std::map<std::string, LinkCorrection> links_under_compute;
  // Collectives that progress on host threads (CPU ranks: MPI over shared memory) fitted per
  // collective kind, idle and under load, from sweeps whose ranks are all CPU devices: the host
  // sums a reduce-scatter's slices on its cores (a pass over the buffer that an all-gather, a
  // plain copy, does not make), so one α-β pair per link kind cannot price both (measured: the
  // reduce-scatter 1.6-3x the all-gather at 64 KiB-1 MiB, costmodels/README.md). Looked up
  // before `links` / `links_under_compute` (which the same points also fit jointly, for the
  // kinds without a fit of their own); empty for GPU sweeps (NCCL reduces inside its copy
  // kernel at link rate).
  std::map<std::pair<std::string, CollectiveKind>, LinkCorrection> host_links;
  std::map<std::pair<std::string, CollectiveKind>, LinkCorrection> host_links_under_compute;
  std::map<std::string, CopyFit> copies;  // by canonical device name (from profiles)
  double launch_overhead_s = 10e-6;       // per collective call
  std::string source = "defaults";
  LinkCorrection correction(const std::string& link_kind) const;
  // The under-load correction when `under_compute` and the kind has one, else correction().
  LinkCorrection correction(const std::string& link_kind, bool under_compute) const;
  // The host fit of this collective kind when there is one (under load first when
  // `under_compute`, then idle), else correction(link_kind, under_compute).
  LinkCorrection correction(const std::string& link_kind, bool under_compute,
                            CollectiveKind collective) const;
};

class AlphaBetaCommModel : public CommModel {
 public:
  AlphaBetaCommModel() = default;
  explicit AlphaBetaCommModel(CommCalibration calibration) : calibration_(std::move(calibration)) {}

  CollectiveEstimate collective(const Cluster& cluster,
                                const CollectiveRequest& request) const override;
  double copy_time(const Cluster& cluster, int rank, double bytes) const override;
  const CommCalibration& calibration() const { return calibration_; }

 private:
  CommCalibration calibration_ = default_calibration();
  static CommCalibration default_calibration();
};

// One measured point of a collective sweep.
struct SweepPoint {
  CollectiveKind kind = CollectiveKind::AllReduce;
  std::vector<int> ranks;      // participants (global ranks of the scenario's cluster)
  double bytes = 0;            // total size, as nccl-tests reports it
  double seconds = 0;          // measured time per call
  bool under_compute = false;  // measured while every rank's compute stream was busy
};

// Reads an nccl-tests-like sweep record (format documented in costmodels/README.md):
// {"format": "cephalo-collective-sweep", "version": 1, "cluster": "...",
//  "results": [{"collective": "all_reduce", "ranks": [0,1,2,3], "bytes": 1048576,
//               "time_us": 812.5, "algbw_GBps": ..., "busbw_GBps": ...,
//               "under_compute": true (optional, default false)}, ...]}
std::vector<SweepPoint> load_collective_sweep(const std::filesystem::path& file);

// Fits per-link-kind bandwidth efficiency and latency to the sweep by least squares on the
// α-β ring model (one kind at a time: the bottleneck link kind of each point's group). Idle
// points give `links`; points measured under compute load, fitted separately the same way,
// give `links_under_compute`. Points whose ranks are all CPU devices are fitted per collective
// kind as well (`host_links`, `host_links_under_compute`).
CommCalibration calibrate_comm(const Cluster& cluster, const std::vector<SweepPoint>& points);

CollectiveKind parse_collective_kind(const std::string& text);  // "all-gather", "all_gather", ...

// The "copies" of a profile in the project's format ({"direction": "d2h"|"h2d", "bytes": N,
// "ms": t}, measured on the device of the file's rows), fitted by least squares on relative
// error to latency + bytes / bandwidth. Returns the device's canonical name and the fit; no
// fit (points = 0) when the file has no copies.
std::pair<std::string, CopyFit> fit_profile_copies(const std::filesystem::path& file);

}  // namespace cephalo::costmodels
