#include "cephalo/costmodels/cost_models.hpp"

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/alpha_beta_comm.hpp"
#include "cephalo/costmodels/analytic_compute.hpp"

namespace cephalo::costmodels {

const std::vector<std::string>& compute_sources() {
  static const std::vector<std::string> names = {"auto", "profile", "calibrated", "roofline"};
  return names;
}

CostModels make_cost_models(const Scenario& scenario, const std::string& source) {
  const auto& names = compute_sources();
  if (std::find(names.begin(), names.end(), source) == names.end())
    throw NotFoundError("cost-model source", source, names);
  (void)scenario;
  CostModels models;
  models.compute = std::make_shared<RooflineComputeModel>();
  models.comm = std::make_shared<AlphaBetaCommModel>();
  return models;
}

}  // namespace cephalo::costmodels
