#include "cephalo/core/stack_calibration.hpp"

#include <cmath>

#include "cephalo/core/error.hpp"

namespace cephalo {

namespace {

constexpr const char* kFormat = "cephalo-stack";

StackFactor parse_factor(JsonReader& factors, const char* key) {
  StackFactor f;
  auto r = factors.child(key);
  if (!r.is_object()) r.fail("an object {\"value\": number, \"identified\": bool}");
  auto v = r.child("value");
  f.value = v.as_number();
  if (!(f.value >= kMinStackFactor && f.value <= kMaxStackFactor))
    v.fail_value(std::to_string(f.value), "a factor in [1/64, " +
                                              std::to_string(static_cast<int>(kMaxStackFactor)) +
                                              "] (the modelled time is multiplied by it)");
  f.identified = r.child("identified").as_bool();
  r.finish();
  return f;
}

Json factor_json(const StackFactor& f) {
  return {{"value", f.value}, {"identified", f.identified}};
}

}  // namespace

StackCalibration parse_stack_calibration(JsonReader& reader) {
  if (!reader.is_object()) reader.fail("a \"cephalo-stack\" object (cephalo calibrate stack)");
  const std::string what = "\"cephalo-stack\" (a file written by `cephalo calibrate stack`)";
  if (!reader.has("format"))
    throw ValidationError(reader.file(),
                          reader.path().empty() ? "format" : reader.path() + ".format",
                          "nothing (missing)", what);
  auto format = reader.child("format");
  if (!format.is_string() || format.as_string() != kFormat)
    format.fail_value(format.is_string() ? format.as_string() : brief(format.value()), what);
  reader.integer("version", 1, 1);
  reader.allow({"description", "notes"});
  StackCalibration s;
  auto factors = reader.child("factors");
  if (!factors.is_object()) factors.fail("an object with \"compute\", \"comm\", \"optimizer\"");
  s.compute = parse_factor(factors, "compute");
  s.comm = parse_factor(factors, "comm");
  s.optimizer = parse_factor(factors, "optimizer");
  factors.finish();
  auto on = reader.child("fitted_on");
  if (!on.is_object()) on.fail("an object saying what the factors were fitted on");
  auto& f = s.fitted_on;
  f.model = on.string("model");
  f.family = on.string("family");
  auto gpus = on.child("gpus");
  if (!gpus.is_array()) gpus.fail("an array of GPU type names");
  for (auto& g : gpus.elements()) f.gpus.push_back(g.as_string());
  f.ranks = static_cast<int>(on.integer("ranks", 1, 1 << 20));
  f.sequence_length = static_cast<int>(on.integer("sequence_length", 1, 1 << 24));
  f.global_batch = static_cast<int>(on.integer("global_batch", 1, 1 << 30));
  f.dtype = on.string("dtype");
  f.implementation = on.string("implementation");
  f.compute_source = on.string("compute_source");
  f.plan_hash = on.string("plan_hash");
  // "trace": one step of a PyTorch profiler trace, measured_value its seconds (as for "run").
  f.measured = on.child("measured").as_enum({"tokens_per_s", "run", "trace"});
  f.measured_value = on.number("measured_value");
  f.predicted_value = on.number("predicted_value");
  on.finish();
  reader.finish();
  return s;
}

StackCalibration load_stack_calibration(const std::filesystem::path& file) {
  const Json j = read_json_file(file);
  JsonReader r(j, file.string());
  return parse_stack_calibration(r);
}

Json to_json(const StackCalibration& s) {
  const auto& f = s.fitted_on;
  return {{"format", kFormat},
          {"version", 1},
          {"factors",
           {{"compute", factor_json(s.compute)},
            {"comm", factor_json(s.comm)},
            {"optimizer", factor_json(s.optimizer)}}},
          {"fitted_on",
           {{"model", f.model},
            {"family", f.family},
            {"gpus", f.gpus},
            {"ranks", f.ranks},
            {"sequence_length", f.sequence_length},
            {"global_batch", f.global_batch},
            {"dtype", f.dtype},
            {"implementation", f.implementation},
            {"compute_source", f.compute_source},
            {"plan_hash", f.plan_hash},
            {"measured", f.measured},
            {"measured_value", f.measured_value},
            {"predicted_value", f.predicted_value}}}};
}

}  // namespace cephalo
