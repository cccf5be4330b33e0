// The published software stacks: each stack's factor and flash-attention weight, fitted on the
// published end-to-end points (published_throughput.hpp), and which factors a job is priced with.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "cephalo/costmodels/calibrated.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "published_throughput.hpp"

namespace cephalo::costmodels {

// The factor of each published software stack: the geometric mean over its points of
// measured / predicted iteration time, with every factor above fixed (so after the lookup tables)
// (one scalar per implementation label, tensor-core points only; communication, a few per cent of
// these iterations, is absorbed). Only the published sources' own points are used.
//
// With published_attention_weight, the stack's flash-attention FLOPs also get their own weight
// β (its attention kernel's rate relative to its GEMMs'): the predicted time is linear in β,
// T(β) = T_rest + β·T_attention, read off two evaluations (β = 1, 2); β is the grid value in
// [0.25, 8] (steps of 2^(1/8)) with the least squared log error, the factor then the geometric
// mean of measured / T(β). The points span sequence 512-8192 (attention 1-16 % of the FLOPs).
void CalibratedComputeModel::fit_published_stacks(const CalibrationOptions& o) {
  struct Obs {
    double measured, rest, attention;
  };
  std::map<int, std::vector<Obs>> by_stack;
  for (const auto& pt : builtin_published_throughput()) {
    const DeviceSpec& gpu = GpuCatalog::builtin().get(pt.gpu);
    if (pipeline_class(gpu, pt.job.precision.compute) != 1) continue;
    if (std::find(o.exclude_gpus.begin(), o.exclude_gpus.end(), pt.gpu) != o.exclude_gpus.end())
      continue;
    const int key = stack_key(pt.job.implementation);
    const double t1 = published_compute_seconds(*this, pt);
    double t2 = t1;
    if (o.published_attention_weight) {
      stack_attention_[key] = 2.0;
      t2 = published_compute_seconds(*this, pt);
      stack_attention_.erase(key);
    }
    by_stack[key].push_back({pt.measured_iteration_s(), 2 * t1 - t2, t2 - t1});
  }
  for (const auto& entry : by_stack) {
    // Named, not a structured binding: clang before 16 cannot capture a binding in a lambda.
    const int key = entry.first;
    const auto& obs = entry.second;
    auto fit_at = [&](double beta, double* factor) {
      double sum = 0, sq = 0;
      for (const auto& ob : obs) sum += std::log(ob.measured / (ob.rest + beta * ob.attention));
      const double mu = sum / static_cast<double>(obs.size());
      for (const auto& ob : obs) {
        const double e = std::log(ob.measured / (ob.rest + beta * ob.attention)) - mu;
        sq += e * e;
      }
      *factor = std::exp(mu);
      return sq;
    };
    double best_beta = 1, best_factor = 1;
    double best = fit_at(1.0, &best_factor);
    if (o.published_attention_weight)
      for (int i = -16; i <= 24; ++i) {
        const double beta = std::pow(2.0, i / 8.0);
        double f = 1;
        const double sq = fit_at(beta, &f);
        if (sq < best) {
          best = sq;
          best_beta = beta;
          best_factor = f;
        }
      }
    stack_[key] = {best_factor, static_cast<int>(obs.size())};
    if (best_beta != 1.0) stack_attention_[key] = best_beta;
  }
}

double CalibratedComputeModel::stack_factor(const Implementation& impl, int pipeline) const {
  if (pipeline != 1) return 1;
  auto it = stack_.find(stack_key(impl));
  return it == stack_.end() ? 1.0 : it->second.first;
}

double CalibratedComputeModel::stack_attention_weight(const Implementation& impl,
                                                      int pipeline) const {
  if (pipeline != 1 || stack_attention_.empty()) return 1;
  auto it = stack_attention_.find(stack_key(impl));
  return it == stack_attention_.end() ? 1.0 : it->second;
}

int CalibratedComputeModel::stack_points(const Implementation& impl) const {
  auto it = stack_.find(stack_key(impl));
  return it == stack_.end() ? 0 : it->second.second;
}

std::pair<std::string, std::string> CalibratedComputeModel::job_stack(const Job& job) {
  // Eager, unfused layers of a family are what the Cephalo source ran for that family (its
  // DeepSpeed-style GPT, BERT and ViT layers): that source's factors, with the model's own
  // when it was profiled. Any other stack is priced by its op list with the factors of the
  // reference stack, the source's Hugging Face LLaMA layers; a GPT-shaped model no longer
  // inherits the DeepSpeed GPT layers' 2-3x slowdown.
  const Implementation& impl = job.implementation;
  if (impl.attention == AttentionKernel::Eager && !impl.fused())
    return {job.model.family, job.model.name};
  return {kReferenceStack, ""};
}
}  // namespace cephalo::costmodels
