// GraphBuilder: the collectives of a phase (a group's gather or reduce-scatter of the phase's
// units, the cross-group reduction of a unit), made by the data-parallel collectives both
// builders share (graph_ops.hpp); the variant is decided there once, from the integer slices,
// and the replay and the executor read it (traces/README.md, "Decisions the graph carries").
#include <stdexcept>

#include "cephalo/costmodels/model_math.hpp"
#include "graph_builder.hpp"

namespace cephalo::traces {

// The cross-group reduction of unit u after phase p: members are all built ranks (in rank
// order), each moving its slice.
std::int32_t GraphBuilder::add_cross_reduction(int p, int u) {
  return DataParallelCollectives::add_cross_reduction(g_, scenario_.job.precision,
                                                      {g_.layout_, g_.all_ranks_}, u, p, built_);
}

// One collective of phase p: the gather of its parameters or the reduce-scatter of its
// gradient, over the group's built ranks.
std::int32_t GraphBuilder::add_collective(int p, bool gather, int group) {
  const Phase& ph = phases_[p];
  const ModelSpec& model = scenario_.job.model;
  // A head tied to the embedding brings the whole embedding unit (costmodels::phase_parameters).
  const double extra =
      costmodels::phase_parameters(model, ph.unit) - costmodels::unit_parameters(model, ph.unit);
  std::vector<int> units;
  if (extra > 0) {
    if (extra != costmodels::unit_parameters(model, 0))
      throw std::logic_error("phase_parameters adds something other than the embedding unit");
    units.push_back(0);
  }
  units.push_back(ph.unit);
  return DataParallelCollectives::add_group(
      g_, scenario_.job.precision, variants_, {g_.layout_, g_.all_ranks_}, group, units, gather,
      ph.pass, ph.unit, p, built_of_group_[static_cast<std::size_t>(group)]);
}

}  // namespace cephalo::traces
