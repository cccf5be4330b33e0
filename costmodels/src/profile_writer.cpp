#include "cephalo/costmodels/profile_writer.hpp"

namespace cephalo::costmodels {

namespace {

Json point_json(const MeasuredPoint& p) {
  Json j = {
      {"micro_batch", p.micro_batch}, {"forward_ms", p.forward_ms}, {"backward_ms", p.backward_ms}};
  if (p.recompute_ms >= 0) j["recompute_ms"] = p.recompute_ms;
  j["repeats"] = p.repeats;
  j["stddev_ms"] = p.stddev_ms;
  return j;
}

Json points_json(const std::vector<MeasuredPoint>& points) {
  Json out = Json::array();
  for (const auto& p : points) out.push_back(point_json(p));
  return out;
}

Json collective_json(const MeasuredCollective& c, bool with_uneven) {
  Json j = {{"collective", c.collective}, {"ranks", c.ranks},
            {"bytes", c.bytes},           {"time_us", c.time_us},
            {"algbw_GBps", c.algbw_GBps}, {"busbw_GBps", c.busbw_GBps}};
  if (with_uneven) j["uneven"] = c.uneven;
  if (c.uneven) j["shares"] = c.shares;
  if (c.under_compute) j["under_compute"] = true;
  return j;
}

}  // namespace

Json profile_to_json(const MeasuredProfile& p) {
  Json rows = Json::array();
  for (const auto& r : p.rows)
    rows.push_back({{"model", r.model},
                    {"gpu", r.gpu},
                    {"seq", r.seq},
                    {"dtype", to_string(r.dtype)},
                    {"implementation", to_json(r.implementation)},
                    {"layer", points_json(r.layer)},
                    {"embedding", points_json(r.embedding)},
                    {"head", points_json(r.head)}});
  Json optimizer = Json::array();
  for (const auto& o : p.optimizer)
    optimizer.push_back({{"gpu", o.gpu}, {"parameters", o.parameters}, {"ms", o.ms}});
  Json copies = Json::array();
  for (const auto& c : p.copies)
    copies.push_back({{"direction", c.direction}, {"bytes", c.bytes}, {"ms", c.ms}});
  Json record = {{"format", "cephalo-profile"},
                 {"version", 1},
                 {"tool", p.tool},
                 {"date", p.date},
                 {"host", p.host},
                 {"source", p.source},
                 {"rows", rows},
                 {"optimizer", optimizer},
                 {"copies", copies}};
  if (!p.collectives.empty()) {
    Json coll = Json::array();
    for (const auto& c : p.collectives) coll.push_back(collective_json(c, true));
    record["collectives"] = coll;
  }
  return record;
}

Json collective_sweep_to_json(const MeasuredProfile& p, const std::string& device) {
  Json results = Json::array();
  for (const auto& c : p.collectives)
    if (!c.uneven) results.push_back(collective_json(c, false));
  return {{"format", "cephalo-collective-sweep"},
          {"version", 1},
          {"tool", p.tool},
          {"date", p.date},
          {"device", device},
          {"results", results}};
}

}  // namespace cephalo::costmodels
