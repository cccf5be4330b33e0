#include "oracle_dump.hpp"

#include <cstdio>
#include <utility>

#include "cephalo/core/json_reader.hpp"

namespace cephalo::backend {
namespace {

std::string numbered(const char* stem, int step, const char* ext) {
  char name[64];
  std::snprintf(name, sizeof name, "%s_%05d.%s", stem, step, ext);
  return name;
}

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

OracleDump::OracleDump(std::filesystem::path dir, Executor& exec, const Scenario& scenario,
                       const Plan& plan, std::uint64_t data_seed, int rank)
    : dir_(std::move(dir)),
      exec_(exec),
      scenario_(scenario),
      plan_(plan),
      seed_(data_seed),
      rank_(rank),
      first_step_(exec.next_step()) {
  if (rank_ == 0) std::filesystem::create_directories(dir_);
}

void OracleDump::write_floats(const std::string& name, const std::vector<float>& v) const {
  write_file_atomically(dir_ / name, bytes_of(v));
}

void OracleDump::before_training() {
  const auto params = exec_.gather_parameters();  // collective
  if (rank_ == 0) write_floats(numbered("params", exec_.next_step(), "f32"), params);
}

void OracleDump::after_step(const StepResult& r) {
  const auto grads = exec_.gather_gradients();    // collective
  const auto params = exec_.gather_parameters();  // collective
  steps_.push_back(r);
  if (rank_ != 0) return;
  write_floats(numbered("grads", r.step, "f32"), grads);
  write_floats(numbered("params", r.step + 1, "f32"), params);
  // The samples the executor's prepare_data hands out: global index i of step S, rank r taking
  // the indices after those of ranks < r, so the global batch is the same for every plan.
  const GptConfig& cfg = exec_.model().config();
  const int batch = plan_.global_batch();
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch) * cfg.seq),
      targets(tokens.size());
  for (int i = 0; i < batch; ++i)
    synthetic_sample(cfg, seed_, r.step, i, tokens.data() + std::size_t(i) * cfg.seq,
                     targets.data() + std::size_t(i) * cfg.seq);
  write_file_atomically(dir_ / numbered("tokens", r.step, "i32"), bytes_of(tokens));
  write_file_atomically(dir_ / numbered("targets", r.step, "i32"), bytes_of(targets));
}

void OracleDump::finish() {
  if (rank_ != 0) return;
  // The dumps hold the single-rank model (under a split too): its layout, not a TP slice's.
  const GptModel model(exec_.model().config());
  const GptConfig& c = model.config();
  Json layout = Json::array();
  for (int u = 0; u < model.num_units(); ++u) {
    Json tensors = Json::array();
    for (const auto& s : model.unit_slots(u))
      tensors.push_back({{"name", s.name}, {"offset", s.offset}, {"numel", s.numel}});
    layout.push_back({{"unit", u}, {"name", model.unit_name(u)}, {"tensors", tensors}});
  }
  Json steps = Json::array();
  for (const auto& r : steps_)
    steps.push_back({{"step", r.step},
                     {"loss", r.loss},
                     {"loss_scale", r.loss_scale},
                     {"update_skipped", r.skipped}});
  const Json out = {{"model",
                     {{"layers", c.layers},
                      {"hidden", c.hidden},
                      {"heads", c.heads},
                      {"ffn", c.ffn},
                      {"vocab", c.vocab},
                      {"seq", c.seq},
                      {"positions", c.position_rows()},
                      {"ln_eps", c.ln_eps},
                      {"tied_head", c.tied_head}}},
                    {"layout", layout},
                    {"job", to_json(scenario_.job)},
                    {"plan", to_json(plan_)},
                    {"data_seed", seed_},
                    {"first_step", first_step_},
                    {"steps", steps}};
  write_file_atomically(dir_ / "oracle.json", out.dump(2));
}

}  // namespace cephalo::backend
