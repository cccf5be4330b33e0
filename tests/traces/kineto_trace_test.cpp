// PyTorch profiler traces (traces/kineto_trace.hpp, trace_compare.hpp): classification of
// hand-built traces with known answers, the three real GPU traces of tests/data/kineto, and
// every bad input refused naming the file and what was expected.
#include <gtest/gtest.h>
#include <zlib.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cephalo/core/error.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "cephalo/traces/kineto_trace.hpp"
#include "cephalo/traces/trace_compare.hpp"

namespace cephalo::traces {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path data(const char* name) {
  return fs::path(CEPHALO_SOURCE_DIR) / "tests/data/kineto" / name;
}

json x(const std::string& name, double ts, double dur, const std::string& cat = "cpu_op",
       int tid = 1, json args = json::object()) {
  json e = {{"ph", "X"}, {"name", name}, {"ts", ts}, {"dur", dur}, {"pid", 1}, {"tid", tid}};
  if (!cat.empty()) e["cat"] = cat;
  if (!args.empty()) e["args"] = args;
  return e;
}

// The legacy profiler's form (Debian's CPU-only torch writes it): a bare array, no categories.
// Two steps of 1000 us: forward [10, 300) with five layer norms, backward [310, 800), the
// optimizer [810, 990); before the forward an unannotated op of 8 us.
json cpu_steps() {
  json ev = json::array();
  for (int s = 0; s < 2; ++s) {
    const double o = 1000.0 * s;
    ev.push_back(x("ProfilerStep#" + std::to_string(s + 3), o, 1000, ""));
    ev.push_back(x("aten::randint", o + 1, 8, ""));
    ev.push_back(x("## forward ##", o + 10, 290, ""));
    for (int k = 0; k < 5; ++k) ev.push_back(x("aten::layer_norm", o + 20 + 40 * k, 30, ""));
    ev.push_back(x("## backward ##", o + 310, 490, ""));
    ev.push_back(x("autograd::engine::evaluate_function: MmBackward0", o + 320, 100, ""));
    ev.push_back(x("## optimizer ##", o + 810, 180, ""));
    ev.push_back(x("Optimizer.step#AdamW.step", o + 820, 150, ""));
  }
  return ev;
}

KinetoTrace parse(const json& j, const std::string& file = "t.json") {
  return parse_kineto_trace(j.dump(), file);
}

std::string gzip_of(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// The refusal's message: names the file, and the fragment of what was expected.
void expect_refused(const std::function<void()>& f, const std::string& file,
                    const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected a refusal with \"" << fragment << "\"";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.file(), file) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(KinetoTrace, ClassifiesAnAnnotatedCpuStepByItsRanges) {
  const auto t = parse(cpu_steps());
  EXPECT_EQ(t.format, "legacy");
  ASSERT_EQ(t.steps.size(), 2u);
  const auto& s = t.step("ProfilerStep#4", "arguments", "step");
  EXPECT_EQ(s.number, 4);
  EXPECT_NEAR(s.duration_s, 1000e-6, 1e-12);
  EXPECT_NEAR(s.seconds_of(TraceClass::Forward), 290e-6, 1e-12);
  EXPECT_NEAR(s.seconds_of(TraceClass::Backward), 490e-6, 1e-12);
  EXPECT_NEAR(s.seconds_of(TraceClass::Optimizer), 180e-6, 1e-12);
  EXPECT_EQ(s.seconds_of(TraceClass::Collective), 0);
  EXPECT_NEAR(s.outside_classes_s, 40e-6, 1e-12);  // 1000 - 290 - 490 - 180
  EXPECT_EQ(s.forward_passes, 1);
  EXPECT_EQ(s.layer_norms, 5);
  EXPECT_FALSE(t.times_from_kernels);
  // The unannotated op of each step is reported, not dropped.
  ASSERT_EQ(t.unclassified.size(), 1u);
  EXPECT_EQ(t.unclassified[0].category, "(none)");
  EXPECT_EQ(t.unclassified[0].events, 2);
  EXPECT_NEAR(t.unclassified[0].seconds, 16e-6, 1e-12);
  EXPECT_EQ(&t.step("3", "arguments", "step"), &t.steps[0]);
  // A step the trace lacks is the argument's fault: blamed on it, naming the trace's steps.
  expect_refused([&] { t.step("ProfilerStep#9", "command line", "--step"); }, "command line",
                 "at --step: got \"ProfilerStep#9\"; expected one of the 2 steps of t.json "
                 "(ProfilerStep#N or N): ProfilerStep#3, ProfilerStep#4");
}

TEST(KinetoTrace, GpuKernelsTakeTheClassOfTheirLaunchAndNcclKernelsAreCollectives) {
  json ev = json::array();
  auto launch = [&](double ts, int corr, int tid) {
    ev.push_back(x("cudaLaunchKernel", ts, 5, "cuda_runtime", tid, {{"correlation", corr}}));
  };
  auto kernel = [&](const std::string& name, double ts, double dur, int corr, int stream) {
    ev.push_back(x(name, ts, dur, "kernel", stream,
                   {{"correlation", corr}, {"stream", stream}, {"device", 0}}));
  };
  ev.push_back(x("ProfilerStep#7", 0, 1000, "user_annotation"));
  ev.push_back(x("## forward ##", 0, 400, "user_annotation"));
  launch(10, 1, 1);
  // The backward on the autograd thread, outside any annotation of the main thread.
  ev.push_back(x("autograd::engine::evaluate_function: MmBackward0", 400, 400, "cpu_op", 2));
  launch(410, 2, 2);
  launch(420, 4, 2);  // the NCCL kernel's launch
  ev.push_back(x("Optimizer.step#AdamW.step", 800, 150, "user_annotation"));
  launch(810, 3, 1);
  kernel("ampere_sgemm_128x64_nn", 50, 200, 1, 7);
  kernel("void at::native::mm_backward_kernel", 450, 250, 2, 7);
  kernel("ncclDevKernel_AllGather_RING_LL(ncclDevComm*)", 500, 150, 4, 20);
  kernel("multi_tensor_apply_kernel", 820, 80, 3, 7);
  kernel("orphan_kernel", 960, 20, 99, 7);  // no launch in the trace
  ev.push_back(x("something", 0, 1, "weird_category"));
  json root = {{"schemaVersion", 1}, {"traceEvents", ev}};
  const auto t = parse(root);
  EXPECT_EQ(t.format, "kineto");
  EXPECT_TRUE(t.times_from_kernels);
  EXPECT_EQ(t.kernels, 5);
  EXPECT_EQ(t.nccl_kernels, 1);
  EXPECT_EQ(t.kernels_without_launch, 1);
  const auto& s = t.steps.at(0);
  EXPECT_NEAR(s.seconds_of(TraceClass::Forward), 200e-6, 1e-12);
  EXPECT_NEAR(s.seconds_of(TraceClass::Backward), 250e-6, 1e-12);
  EXPECT_NEAR(s.seconds_of(TraceClass::Optimizer), 80e-6, 1e-12);
  EXPECT_NEAR(s.seconds_of(TraceClass::Collective), 150e-6, 1e-12);
  // Every kernel of the step, the orphan too: [50, 250) + [450, 700) + [820, 900) + [960, 980).
  EXPECT_NEAR(s.gpu_busy_s, 550e-6, 1e-12);
  ASSERT_EQ(s.collectives.size(), 1u);
  EXPECT_EQ(s.collectives[0].kind, "all-gather");
  EXPECT_EQ(s.collectives[0].events, 1);
  // The orphan kernel and the NCCL kernel's unannotated launch are reported.
  int unclassified_kernels = 0, unclassified_launches = 0;
  for (const auto& u : t.unclassified) {
    if (u.category == "kernel") unclassified_kernels = u.events;
    if (u.category == "cuda_runtime") unclassified_launches = u.events;
  }
  EXPECT_EQ(unclassified_kernels, 1);
  EXPECT_EQ(unclassified_launches, 0);  // its launch sits inside the backward range
  EXPECT_EQ(t.unknown_categories.at("weird_category"), 1);
  ASSERT_FALSE(t.notes.empty());
  EXPECT_NE(t.notes[0].find("weird_category"), std::string::npos);
}

TEST(KinetoTrace, AForwardInsideTheBackwardIsBackward) {
  // A checkpointed layer's recompute runs module forwards inside the backward.
  json ev = json::array({x("ProfilerStep#1", 0, 100, ""), x("## backward ##", 0, 100, ""),
                         x("nn.Module: Block.forward", 10, 50, "")});
  const auto t = parse(ev);
  EXPECT_NEAR(t.steps[0].seconds_of(TraceClass::Backward), 100e-6, 1e-12);
  EXPECT_EQ(t.steps[0].seconds_of(TraceClass::Forward), 0);
  EXPECT_EQ(t.steps[0].forward_passes, 0);
}

TEST(KinetoTrace, ReadsTheRealGpuTracesAndReportsWhatItClassified) {
  struct Expected {
    const char* file;
    std::size_t steps;
    int nccl;
    const char* collective;  // a kind every step has, "" for none
    int world;
  };
  // Counts from the files themselves (Python's json over the gunzipped text: ProfilerStep#
  // ranges, kernels whose name has "nccl").
  for (const Expected e : {Expected{"a100-resnet-nccl.json.gz", 3, 21, "all-reduce", 2},
                           Expected{"v100-resnet-rank0.json.gz", 5, 0, "", 1},
                           Expected{"a100-80gb-adam-rank0.json.gz", 5, 80, "", 16}}) {
    SCOPED_TRACE(e.file);
    const auto t = load_kineto_trace(data(e.file));
    EXPECT_TRUE(t.gzip);
    EXPECT_TRUE(t.times_from_kernels);
    EXPECT_EQ(t.steps.size(), e.steps);
    EXPECT_EQ(t.nccl_kernels, e.nccl);
    EXPECT_EQ(t.world_size.value_or(-1), e.world);
    EXPECT_FALSE(t.devices.empty());
    for (const auto& s : t.steps) {
      SCOPED_TRACE(s.name);
      EXPECT_GT(s.seconds_of(TraceClass::Backward), 0);
      EXPECT_GT(s.seconds_of(TraceClass::Optimizer), 0);
      double classified = 0;
      for (double c : s.seconds) classified += c;
      EXPECT_GT(classified, 0);
      EXPECT_LE(s.outside_classes_s, s.duration_s);
      if (*e.collective) {
        bool found = false;
        for (const auto& c : s.collectives)
          found = found || (c.kind == e.collective && c.seconds > 0);
        EXPECT_TRUE(found);
      }
    }
    // What no class took is reported with its time.
    ASSERT_FALSE(t.unclassified.empty());
    const std::string text = render_kineto_trace(t);
    EXPECT_NE(text.find("unclassified:"), std::string::npos);
    EXPECT_NO_THROW(to_json(t).dump());
  }
}

// Scenarios to check traces against, from the catalog.
Scenario scenario_of(const std::string& gpu, int count, int layers) {
  const fs::path f =
      fs::temp_directory_path() / (std::to_string(::getpid()) + "_kineto_" + gpu +
                                   std::to_string(count) + "_" + std::to_string(layers) + ".json");
  json s = {
      {"name", "t"},
      {"cluster",
       {{"name", "c"},
        {"nodes",
         {{{"name", "n"},
           {"gpus", {{{"type", gpu}, {"count", count}}}},
           {"intra_link", {{"kind", "nvlink"}, {"bandwidth", "300GB/s"}, {"latency", "2us"}}}}}}}},
      {"job",
       {{"name", "j"},
        {"model",
         {{"name", "m"},
          {"family", "gpt"},
          {"layers", layers},
          {"hidden", 64},
          {"heads", 4},
          {"vocab_size", 256},
          {"max_positions", 64}}},
        {"sequence_length", 32},
        {"global_batch", 8 * count},
        {"precision", {{"params", "fp32"}, {"compute", "fp32"}, {"reduce", "fp32"}}}}}};
  if (gpu == "cpu")
    s["cluster"]["nodes"][0]["intra_link"] = {
        {"kind", "shm"}, {"bandwidth", "5GB/s"}, {"latency", "2us"}};
  std::ofstream(f) << s.dump();
  return costmodels::load_scenario(f);
}

TEST(KinetoTrace, ATraceFromAnotherGpuOrClusterIsRefused) {
  const auto t = load_kineto_trace(data("a100-resnet-nccl.json.gz"));
  const std::string file = data("a100-resnet-nccl.json.gz").string();
  std::vector<std::string> notes;
  // Its GPU: "NVIDIA A100-PG509-200", 42.3 GB, 108 SMs, compute 8.0; two ranks.
  EXPECT_EQ(check_trace_for(t, t.steps[0], scenario_of("A100-40GB", 2, 2), nullptr, notes), 0);
  expect_refused(
      [&] { check_trace_for(t, t.steps[0], scenario_of("A100-80GB", 2, 2), nullptr, notes); }, file,
      "deviceProperties[0].totalGlobalMem");
  expect_refused(
      [&] { check_trace_for(t, t.steps[0], scenario_of("RTX-A6000", 2, 2), nullptr, notes); }, file,
      "numSms");
  expect_refused(
      [&] { check_trace_for(t, t.steps[0], scenario_of("A100-40GB", 3, 2), nullptr, notes); }, file,
      "distributedInfo.world_size");
  expect_refused([&] { check_trace_for(t, t.steps[0], scenario_of("cpu", 2, 2), nullptr, notes); },
                 file, "a CPU run's trace");
  // A CPU trace for a GPU rank.
  const auto cpu = parse(cpu_steps());
  expect_refused(
      [&] { check_trace_for(cpu, cpu.steps[0], scenario_of("A100-40GB", 1, 2), nullptr, notes); },
      "t.json", "the kernels of a GPU run");
}

TEST(KinetoTrace, ATraceOfAnotherModelIsRefusedByItsLayerNorms) {
  const auto t = parse(cpu_steps());  // five layer norms per forward: 2 layers
  std::vector<std::string> notes;
  EXPECT_EQ(check_trace_for(t, t.steps[0], scenario_of("cpu", 1, 2), nullptr, notes), 0);
  expect_refused([&] { check_trace_for(t, t.steps[0], scenario_of("cpu", 1, 4), nullptr, notes); },
                 "t.json", "a multiple of 9");
}

TEST(KinetoTrace, BadInputIsRefusedNamingTheFileAndWhatWasExpected) {
  const std::string good = cpu_steps().dump();
  // Truncated JSON.
  expect_refused([&] { parse_kineto_trace(good.substr(0, good.size() / 2), "cut.json"); },
                 "cut.json", "");
  // No events, and events that are all of unknown categories.
  expect_refused([&] { parse(json::array(), "empty.json"); }, "empty.json", "at least one");
  expect_refused(
      [&] {
        parse(json{{"traceEvents", json::array()}}, "empty.json");
      },
      "empty.json", "$.traceEvents");
  expect_refused(
      [&] {
        parse(json{{"traceEvents", {x("k", 0, 1, "mystery")}}}, "u.json");
      },
      "u.json", "unknown categories: mystery (1)");
  // Nothing classifiable: ops without any annotation.
  expect_refused([&] { parse(json::array({x("aten::mm", 0, 5, "")}), "plain.json"); }, "plain.json",
                 "none of them forward, backward, optimizer or collective");
  // Not a trace.
  expect_refused(
      [&] {
        parse(json{{"iteration_time_s", 1}}, "run.json");
      },
      "run.json", "traceEvents");
  // Timestamps out of order: a negative duration, ranges that overlap without nesting, steps
  // out of order.
  expect_refused([&] { parse(json::array({x("## forward ##", 10, -5, "")}), "neg.json"); },
                 "neg.json", "out of order");
  expect_refused(
      [&] {
        parse(json::array({x("## forward ##", 0, 100, ""), x("aten::mm", 50, 100, "")}),
              "overlap.json");
      },
      "overlap.json", "timestamps out of order");
  expect_refused(
      [&] {
        parse(json::array({x("ProfilerStep#2", 0, 100, ""), x("## forward ##", 0, 50, ""),
                           x("ProfilerStep#1", 100, 100, "")}),
              "order.json");
      },
      "order.json", "steps in order");
  json text_dur = x("## forward ##", 0, 5, "");
  text_dur["dur"] = "5";
  expect_refused([&] { parse(json::array({text_dur}), "dur.json"); }, "dur.json",
                 "$.traceEvents[0].dur");
  // gzip that is not gzip, gzip cut short, a gzip bomb past the bound.
  expect_refused([&] { parse_kineto_trace(good, "trace.json.gz"); }, "trace.json.gz",
                 "gzip's magic 1f 8b");
  const std::string gz = gzip_of(good);
  EXPECT_EQ(parse_kineto_trace(gz, "trace.json.gz").steps.size(), 2u);
  expect_refused([&] { parse_kineto_trace(gz.substr(0, gz.size() / 2), "cut.json.gz"); },
                 "cut.json.gz", "truncated");
  std::string bomb_text = "[" + std::string(std::size_t{8} << 20, ' ') + "]";
  const std::string bomb = gzip_of(bomb_text);
  EXPECT_LT(bomb.size(), 64u << 10);
  expect_refused([&] { parse_kineto_trace(bomb, "bomb.json.gz", std::uint64_t{1} << 20); },
                 "bomb.json.gz", "the trace size bound");
  expect_refused([&] { parse_kineto_trace(gz + "junk", "tail.json.gz"); }, "tail.json.gz",
                 "after the end");
}

TEST(KinetoTrace, LooksLikeTraceTellsATraceFromARunResult) {
  EXPECT_TRUE(looks_like_trace(cpu_steps().dump()));
  EXPECT_TRUE(looks_like_trace(json{{"traceEvents", json::array()}}.dump()));
  EXPECT_TRUE(looks_like_trace(gzip_of("{}")));
  EXPECT_FALSE(looks_like_trace(json{{"source", "cpu"}, {"iteration_time_s", 1}}.dump()));
}

}  // namespace
}  // namespace cephalo::traces
