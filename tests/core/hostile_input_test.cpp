// Inputs too large, too deep or of the wrong kind to keep as files in tests/data/bad: FIFOs and
// devices, megabyte keys, nesting deeper than any stack, a plan made for another scenario.
// Each must get a clean error with the right exit code, never a crash or a hang.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "../support/run_command.hpp"
#include "cephalo/core/error.hpp"
#include "cephalo/core/json_reader.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = CEPHALO_SOURCE_DIR;

using Outcome = cephalo::test_support::CliOutput;
using cephalo::test_support::run_cephalo;

// "inf" or "nan" as a word of its own (not "infeasible"), any case.
bool prints_non_finite(const std::string& text) {
  static const std::regex word(R"((^|[^A-Za-z])(inf|nan)([^A-Za-z]|$))", std::regex::icase);
  return std::regex_search(text, word);
}

class HostileInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cephalo_hostile_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  fs::path dir_;
};

TEST_F(HostileInput, FifoIsRefusedAtOnceNotOpened) {
  const fs::path fifo = dir_ / "plan.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Outcome o = run_cephalo("validate " + fifo.string());
  EXPECT_EQ(o.exit_code, 5) << o.output;  // 124 would be the hang this guards against
  EXPECT_NE(o.output.find("FIFO"), std::string::npos) << o.output;
  // As a scenario and as a plan of a command, too.
  o = run_cephalo("simulate --scenario " + fifo.string() + " --plan " + fifo.string());
  EXPECT_EQ(o.exit_code, 5) << o.output;
  EXPECT_THROW(cephalo::read_json_file(fifo), cephalo::IoError);
}

TEST_F(HostileInput, DeviceAndDirectoryAreRefused) {
  Outcome o = run_cephalo("validate /dev/null");
  EXPECT_EQ(o.exit_code, 5) << o.output;
  EXPECT_NE(o.output.find("character device"), std::string::npos) << o.output;
  o = run_cephalo("validate " + dir_.string());
  EXPECT_EQ(o.exit_code, 5) << o.output;
  EXPECT_NE(o.output.find("is a directory"), std::string::npos) << o.output;
  o = run_cephalo("validate " + (dir_ / "missing.json").string());
  EXPECT_EQ(o.exit_code, 5) << o.output;
  EXPECT_NE(o.output.find("no such file"), std::string::npos) << o.output;
}

TEST_F(HostileInput, HugeKeyIsEchoedClippedWithItsLength) {
  const std::string key(5 * 1000 * 1000, 'k');
  fs::path p = write("cluster.json", "{\"nodes\": [{\"gpus\": [\"l4\"]}], \"" + key + "\": 1}");
  Outcome o = run_cephalo("validate " + p.string());
  EXPECT_EQ(o.exit_code, 1) << o.output.substr(0, 1000);
  EXPECT_LT(o.output.size(), 4000u) << o.output.substr(0, 1000);
  EXPECT_NE(o.output.find("5000000 bytes in all"), std::string::npos) << o.output.substr(0, 1000);
  // The same for a huge unknown GPU name (a "closest" hint is no use for it either).
  p = write("gpu.json", "{\"nodes\": [{\"gpus\": [\"" + key + "\"]}]}");
  o = run_cephalo("validate " + p.string());
  EXPECT_EQ(o.exit_code, 1) << o.output.substr(0, 1000);
  EXPECT_LT(o.output.size(), 4000u) << o.output.substr(0, 1000);
}

TEST_F(HostileInput, DeepNestingIsRefusedWhileParsing) {
  const int depth = 200000;
  const std::string open(depth, '['), close(depth, ']');
  // Closed and unclosed, at the top level and inside a field, through every reader.
  for (const std::string& text : {open + close, open, "{\"nodes\": " + open + close + "}",
                                  "{\"rows\": [" + open + close + "]}"}) {
    fs::path p = write("deep.json", text);
    Outcome o = run_cephalo("validate " + p.string());
    EXPECT_EQ(o.exit_code, 1) << o.output.substr(0, 1000);
    EXPECT_NE(o.output.find("nesting deeper than 256"), std::string::npos)
        << o.output.substr(0, 1000);
    EXPECT_LT(o.output.size(), 4000u);
  }
  fs::path p =
      write("deep.json", "{\"format\": \"cephalo-profile\", \"rows\": " + open + close + "}");
  Outcome o = run_cephalo("profile validate --profiles " + p.string());
  EXPECT_EQ(o.exit_code, 1) << o.output.substr(0, 1000);
  EXPECT_NE(o.output.find("nesting deeper than 256"), std::string::npos)
      << o.output.substr(0, 1000);
}

TEST_F(HostileInput, DepthLimitIsExactlyTheStatedOne) {
  const auto nested = [](std::size_t depth) {
    return std::string(depth, '[') + std::string(depth, ']');
  };
  EXPECT_NO_THROW(cephalo::parse_json_text(nested(cephalo::kMaxJsonDepth), "ok.json"));
  EXPECT_THROW(cephalo::parse_json_text(nested(cephalo::kMaxJsonDepth + 1), "deep.json"),
               cephalo::ValidationError);
}

TEST_F(HostileInput, DuplicateKeysNameBothPlaces) {
  try {
    cephalo::parse_json_text("{\"a\": {\"b\": 1,\n \"b\": 2}}", "dup.json");
    FAIL() << "duplicate key accepted";
  } catch (const cephalo::ValidationError& e) {
    EXPECT_EQ(e.json_path(), "a.b");
    EXPECT_NE(std::string(e.what()).find("line 1, column 11 and again at line 2, column 5"),
              std::string::npos)
        << e.what();
  }
  // Equal keys in different objects are not duplicates.
  EXPECT_NO_THROW(cephalo::parse_json_text("[{\"a\": 1}, {\"a\": 2}]", "ok.json"));
}

TEST_F(HostileInput, PlanForAnotherScenarioIsRefused) {
  std::ifstream in(kRoot / "scenarios/plans/default-even.json");
  std::string plan((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string name = "\"paper-gpt2.7b\"";
  ASSERT_NE(plan.find(name), std::string::npos);
  fs::path ok = write("ok.json", plan);
  plan.replace(plan.find(name), name.size(), "\"some-other-scenario\"");
  fs::path other = write("other.json", plan);
  const std::string scenario = (kRoot / "scenarios/default.json").string();
  Outcome o = run_cephalo("validate --scenario " + scenario + " " + ok.string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  o = run_cephalo("validate --scenario " + scenario + " " + other.string());
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("at scenario: got \"some-other-scenario\""), std::string::npos)
      << o.output;
  // The commands run the same check.
  o = run_cephalo("simulate --scenario " + scenario + " --plan " + other.string());
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("at scenario"), std::string::npos) << o.output;
}

// 8 ranks x 65536 micro-batches (each within the per-rank bound) of a 34-unit model is more
// schedule than the stated bound: refused by validate and by simulate before any allocation.
// The replay builds one rank per class of alike ranks (core/plan.hpp), so the 8 ranks differ
// in share (8 classes); 8 alike ranks are one class, within the bound, but a trace replays
// every rank and is refused.
TEST_F(HostileInput, ScheduleSizeIsBoundedBeforeSimulating) {
  write("cluster.json", R"({"nodes": [{"gpus": [{"type": "l4", "count": 8}]}]})");
  fs::path scenario = write("scenario.json", R"({"name": "big", "cluster": "cluster.json",
    "job": {"model": "gpt-2.7b", "sequence_length": 512, "global_batch": 524288}})");
  auto plan_with = [&](const std::string& name, bool alike) {
    const char* const distinct[] = {"0.09", "0.1", "0.11", "0.12", "0.13", "0.14", "0.15", "0.16"};
    std::string ranks;
    for (int r = 0; r < 8; ++r)
      ranks += std::string(r ? "," : "") + "{\"rank\": " + std::to_string(r) +
               R"(, "node": 0, "gpu": "l4", "batch": 65536, "micro_batch": 1,
                  "micro_batches": 65536, "state_share": )" +
               (alike ? "0.125" : distinct[r]) + "}";
    return write(name, R"({"version": 1, "scenario": "big", "ranks": [)" + ranks + "]}");
  };
  const fs::path plan = plan_with("plan.json", false);
  const fs::path alike = plan_with("alike.plan.json", true);
  const fs::path trace = plan.parent_path() / "never-written.trace.json";
  for (const std::string& args :
       {"validate --scenario " + scenario.string() + " " + plan.string(),
        "simulate --scenario " + scenario.string() + " --plan " + plan.string(),
        "simulate --scenario " + scenario.string() + " --plan " + alike.string() + " --trace " +
            trace.string()}) {
    SCOPED_TRACE(args);
    Outcome o = run_cephalo(args);
    EXPECT_EQ(o.exit_code, 1) << o.output;
    EXPECT_NE(o.output.find("ranks[*].micro_batches"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("at most 16777216 unit passes"), std::string::npos) << o.output;
  }
}

TEST_F(HostileInput, CalibrationIsCheckedByValidateAsByTheCommands) {
  const fs::path bad = kRoot / "tests/data/bad/plan_as_calibration.scenario.json";
  Outcome v = run_cephalo("validate " + bad.string());
  EXPECT_EQ(v.exit_code, 1) << v.output;
  Outcome p = run_cephalo("plan --strategy even --scenario " + bad.string());
  EXPECT_EQ(p.exit_code, 1) << p.output;
  EXPECT_NE(p.output.find("default-even.json: at format"), std::string::npos) << p.output;
}

// The extremes validate accepts (slowest link, longest latency, slowest device, largest
// slowdown; fastest everything) still give finite predictions: plan and simulate print no inf
// or NaN and do not fail at run time (exit 3 "beyond the simulator's clock" is an answer).
TEST_F(HostileInput, ExtremeButValidValuesGiveFiniteResults) {
  write("cluster.json", R"({"name": "extremes", "nodes": [
    {"gpus": [{"spec": {"name": "slowest", "memory": "1024TiB", "memory_bandwidth": "1MB/s",
                        "peak_fp32": "1MFLOPS"}, "count": 2, "slowdown": 1000}],
     "intra_link": {"kind": "pcie", "bandwidth": "1MB/s", "latency": "1s"},
     "nic": {"kind": "ethernet", "bandwidth": "1MB/s", "latency": "1s"}},
    {"gpus": [{"spec": {"name": "fastest", "memory": "1024TiB", "memory_bandwidth": "100TB/s",
                        "peak_fp32": "1000PFLOPS"}}],
     "intra_link": {"kind": "pcie", "bandwidth": "100TB/s", "latency": 0},
     "nic": {"kind": "ethernet", "bandwidth": "100TB/s", "latency": 0}}]})");
  fs::path scenario = write("scenario.json", R"({"name": "extreme", "cluster": "cluster.json",
    "job": {"model": "gpt-2.7b", "sequence_length": 2048, "global_batch": 64}})");
  Outcome v = run_cephalo("validate " + scenario.string());
  ASSERT_EQ(v.exit_code, 0) << v.output;
  for (const char* strategy : {"even", "proportional"}) {
    SCOPED_TRACE(strategy);
    const fs::path plan = dir_ / (std::string(strategy) + ".json");
    Outcome p = run_cephalo("plan --strategy " + std::string(strategy) + " --scenario " +
                            scenario.string() + " -o " + plan.string());
    // plan replays the plan it returns (its prediction is the simulation), so the clock's
    // limit is plan's answer too.
    ASSERT_TRUE(p.exit_code == 0 || p.exit_code == 3) << p.output;
    EXPECT_FALSE(prints_non_finite(p.output)) << p.output;
    if (p.exit_code == 3) {
      EXPECT_NE(p.output.find("simulator's"), std::string::npos) << p.output;  // its clock's limit
      continue;
    }
    for (const char* format : {"", " --json"}) {
      Outcome s = run_cephalo("simulate" + std::string(format) + " --scenario " +
                              scenario.string() + " --plan " + plan.string());
      EXPECT_TRUE(s.exit_code == 0 || s.exit_code == 3) << s.output;
      EXPECT_FALSE(prints_non_finite(s.output)) << s.output;
    }
  }
}

}  // namespace

// ---- Round two: one answer per question, checked arithmetic through every command ----

// A job of the 1-rank CPU cluster whose model is the Hugging Face config `config` (a file in
// this test's folder), and a scenario of it.
class HostileRoundTwo : public HostileInput {
 protected:
  fs::path scenario_with_config(const std::string& config) {
    write("model.json", config);
    write("job.json",
          R"({"model": {"hf_config": "model.json"}, "sequence_length": 128, "global_batch": 8})");
    return write("scenario.json", R"({"name": "wrapped", "cluster": ")" +
                                      (kRoot / "scenarios/clusters").string() +
                                      R"(/modern-mix.json", "job": "job.json"})");
  }
};

TEST_F(HostileRoundTwo, WrappingModelSizesAreRefusedByEveryCommandNamingTheConfig) {
  // ViT: 46341² patches wrapped a 32-bit count (−1.65e12 embedding parameters, "fits yes").
  const fs::path sc = scenario_with_config(
      R"({"model_type": "vit", "hidden_size": 768, "num_hidden_layers": 2,
          "num_attention_heads": 12, "intermediate_size": 3072, "image_size": 46341,
          "patch_size": 1, "num_labels": 10})");
  const std::string config = (dir_ / "model.json").string();
  for (const std::string& cmd :
       {"validate " + sc.string(), "describe model " + config, "plan --scenario " + sc.string(),
        "simulate --scenario " + sc.string() + " --plan " +
            (kRoot / "scenarios/plans/default-even.json").string()}) {
    SCOPED_TRACE(cmd);
    Outcome o = run_cephalo(cmd);
    EXPECT_EQ(o.exit_code, 1) << o.output;  // simulate was 4, plan named "<input>"
    EXPECT_NE(o.output.find(config + ": at image_size"), std::string::npos) << o.output;
    EXPECT_EQ(o.output.find("<input>"), std::string::npos) << o.output;
    EXPECT_EQ(o.output.find("-1"), std::string::npos) << o.output;
  }
  // MPT's d_model × expansion_ratio wrapped to −2^31.
  scenario_with_config(
      R"({"model_type": "mpt", "d_model": 4194304, "expansion_ratio": 512, "n_heads": 1,
          "n_layers": 2, "vocab_size": 50432, "max_seq_len": 2048})");
  Outcome o =
      run_cephalo("predict layer --gpu l4 --model " + config + " --seq 128 --micro-batch 1");
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_NE(o.output.find("d_model 4194304 × expansion_ratio 512 = 2147483648"), std::string::npos)
      << o.output;
}

TEST_F(HostileRoundTwo, PredictLayerAppliesTheJobsSequenceChecks) {
  const std::string gpt2 = (kRoot / "scenarios/models/gpt2.json").string();
  // Past the learned positions: refused as `validate` refuses the job (a flag: exit 2).
  Outcome o =
      run_cephalo("predict layer --gpu a100 --model " + gpt2 + " --seq 2048 --micro-batch 1");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--seq"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("max_positions (1024"), std::string::npos) << o.output;
  EXPECT_EQ(run_cephalo("predict layer --gpu a100 --model " + gpt2 + " --seq 1024 --micro-batch 1")
                .exit_code,
            0);
  // Past Mistral's sliding window (4096) is accepted: the window is priced.
  const std::string mistral = (kRoot / "scenarios/models/mistral-7b-v0.1.json").string();
  EXPECT_EQ(
      run_cephalo("predict layer --gpu a100 --model " + mistral + " --seq 8192 --micro-batch 1")
          .exit_code,
      0);
  // ViT: the sequence priced is the patches + class token, and the record says so.
  const std::string vit = (kRoot / "scenarios/models/vit-base-patch16-224.json").string();
  o = run_cephalo("predict layer --gpu a100 --model " + vit + " --seq 4096 --micro-batch 1 --json");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const auto j = cephalo::Json::parse(o.output.substr(o.output.find('{')));
  EXPECT_EQ(j["seq"], 197);  // (224 / 16)² + 1, not 4096
  EXPECT_NE(j["notes"].dump().find("not --seq 4096"), std::string::npos) << o.output;
}

TEST_F(HostileRoundTwo, EvenStrategyRefusesHostOffloadInsteadOfDroppingIt) {
  const std::string sc = (kRoot / "scenarios/default.json").string();
  Outcome o = run_cephalo("plan --scenario " + sc + " --strategy even --offload host");
  EXPECT_EQ(o.exit_code, 2) << o.output;  // a flag the strategy cannot honour: command line
  EXPECT_NE(o.output.find("offload"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("--strategy optimal"), std::string::npos) << o.output;
  EXPECT_EQ(run_cephalo("plan --scenario " + sc + " --strategy even --offload none").exit_code, 0);
}

TEST_F(HostileRoundTwo, ValidateRecognisesSweepSpecsAndHuggingFaceConfigs) {
  Outcome o = run_cephalo("validate " + (kRoot / "scenarios/sweeps/gpt2.7b-mixes.json").string() +
                          " " + (kRoot / "scenarios/models/mpt-7b.json").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("ok (sweep spec gpt2.7b-mixes, 4 GPU types)"), std::string::npos)
      << o.output;
  EXPECT_NE(o.output.find("ok (Hugging Face config, model_type mpt)"), std::string::npos)
      << o.output;
}

TEST_F(HostileRoundTwo, ALegalOutputNameOf255BytesIsWritten) {
  const std::string name(255, 'p');
  const fs::path out = dir_ / name;
  Outcome o = run_cephalo("plan --scenario " + (kRoot / "scenarios/default.json").string() +
                          " --strategy even -o " + out.string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_TRUE(fs::is_regular_file(out));
  // No temporary was left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
}
