#pragma once
// The profile-table compute model, with a fallback for what the tables do not cover.
#include <memory>

#include "cephalo/costmodels/compute_model.hpp"
#include "cephalo/costmodels/profile.hpp"

namespace cephalo::costmodels {

class ProfileComputeModel : public ComputeModel {
 public:
  // strict: a layer of a (model, GPU, seq, dtype) without a row is an InfeasibleError (source
  // "profile"); otherwise it goes to the fallback (source "auto"). Embedding and head units
  // use the project's own unit profiles when present, else the fallback, whose name the
  // estimate's source carries.
  ProfileComputeModel(std::shared_ptr<const ProfileTables> tables,
                      std::shared_ptr<const ComputeModel> fallback, bool strict);

  ComputeEstimate unit_time(const DeviceSpec& device, const Job& job, int unit, ComputePhase phase,
                            int micro_batch) const override;
  ComputeEstimate optimizer_time(const DeviceSpec& device, const Job& job,
                                 double shard_parameters) const override;
  std::string name() const override { return strict_ ? "profile" : "auto"; }
  const ProfileTables& tables() const { return *tables_; }

 private:
  std::shared_ptr<const ProfileTables> tables_;
  std::shared_ptr<const ComputeModel> fallback_;
  bool strict_;
};

}  // namespace cephalo::costmodels
