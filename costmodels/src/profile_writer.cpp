#include "cephalo/costmodels/profile_writer.hpp"

#include "cephalo/core/table.hpp"
#include "cephalo/core/units.hpp"

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

std::string render_profile_tables(const MeasuredProfile& prof) {
  std::string out;
  const auto& row = prof.rows.front();
  TextTable t({"micro-batch", "layer F ms", "layer RC ms", "layer B ms", "emb F ms", "emb B ms",
               "head F ms", "head F+B ms"});
  for (std::size_t i = 0; i < row.layer.size(); ++i)
    t.add_row({std::to_string(row.layer[i].micro_batch), fixed(row.layer[i].forward_ms, 3),
               fixed(row.layer[i].recompute_ms, 3), fixed(row.layer[i].backward_ms, 3),
               fixed(row.embedding[i].forward_ms, 3), fixed(row.embedding[i].backward_ms, 3),
               fixed(row.head[i].forward_ms, 3), fixed(row.head[i].backward_ms, 3)});
  out += t.render();
  out += "\n";
  TextTable o({"optimizer parameters", "ms"});
  for (const auto& p : prof.optimizer) o.add_row({fixed(p.parameters, 0), fixed(p.ms, 3)});
  out += o.render();
  if (!prof.collectives.empty()) {
    TextTable c({"collective", "uneven", "under compute", "bytes", "time", "busbw GB/s"});
    for (const auto& p : prof.collectives)
      c.add_row({p.collective, p.uneven ? "yes" : "no", p.under_compute ? "yes" : "no",
                 format_bytes(p.bytes), format_seconds(p.time_us * 1e-6), fixed(p.busbw_GBps, 2)});
    out += "\n";
    out += c.render();
  }
  return out;
}

}  // namespace cephalo::costmodels
