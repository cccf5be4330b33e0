// `cephalo predict` end to end: JSON keys, exit codes and messages for bad input.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cephalo/core/json_reader.hpp"

#include "../support/run_command.hpp"

namespace {

struct Result {
  int code = 0;
  std::string out;
};

Result run(const std::string& args) {
  auto r = cephalo::test_support::run_combined(cephalo::test_support::cephalo_command(args));
  return {r.code, r.output};
}

const std::string kRoot = CEPHALO_SOURCE_DIR;

}  // namespace

TEST(PredictCli, LayerJsonHasTheDocumentedKeys) {
  auto r =
      run("predict layer --gpu l4 --model deepspeedgpt_2.7b --seq 512 --dtype fp16 "
          "--micro-batch 4 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = cephalo::Json::parse(r.out);
  for (const char* key : {"forward_ms", "backward_ms", "source", "extrapolated"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["source"], "profile");
  EXPECT_NEAR(j["forward_ms"].get<double>(), 7.415035999999968 * 4 + 1.1815040000000743, 1e-6);
  auto far = cephalo::Json::parse(run("predict layer --gpu p100 --model gpt-2.7b --seq 512 "
                                      "--dtype fp32 --micro-batch 30 --json")
                                      .out);
  EXPECT_TRUE(far["extrapolated"].get<bool>());
}

TEST(PredictCli, LayerSaysWhichImplementationItPrices) {
  const std::string base =
      "predict layer --gpu a100 --model gpt-2.7b --seq 2048 --dtype fp32 --micro-batch 2 "
      "--source calibrated --json";
  auto flash = run(base);
  auto eager = run(base + " --attention eager --fused-elementwise false");
  ASSERT_EQ(flash.code, 0) << flash.out;
  ASSERT_EQ(eager.code, 0) << eager.out;
  auto f = cephalo::Json::parse(flash.out), e = cephalo::Json::parse(eager.out);
  EXPECT_EQ(f["implementation"]["attention"], "flash");
  EXPECT_EQ(f["implementation"]["framework"], "fsdp2");
  EXPECT_EQ(e["implementation"]["attention"], "eager");
  EXPECT_EQ(e["implementation"]["fused_elementwise"], false);
  // Materialised scores and separate elementwise kernels cost time at sequence 2048.
  EXPECT_GT(e["forward_ms"].get<double>(), 1.1 * f["forward_ms"].get<double>());
  auto compiled = cephalo::Json::parse(run(base + " --attention eager --compiled").out);
  EXPECT_EQ(compiled["implementation"]["compiled"], true);
  EXPECT_LT(compiled["forward_ms"].get<double>(), e["forward_ms"].get<double>());
  // The table names the stack, and a framework that cannot change a layer says so.
  auto table =
      run("predict layer --gpu a100 --model gpt-2.7b --seq 2048 --micro-batch 2 --framework fsdp1");
  ASSERT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("implementation: flash, fused, fsdp1"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("schedule"), std::string::npos) << table.out;
  // A profile row measured on another stack than the one asked for says so.
  auto profiled = run("predict layer --gpu l4 --model deepspeedgpt_2.7b --seq 512 --micro-batch 4");
  EXPECT_NE(profiled.out.find("measured with \"eager, unfused\""), std::string::npos)
      << profiled.out;
  // Unknown values: refused with the allowed list (a bad command line, exit 2).
  for (const auto& [flags, allowed] :
       std::vector<std::pair<std::string, std::string>>{{"--framework megatron", "deepspeed_zero3"},
                                                        {"--attention paged", "eager"},
                                                        {"--fused-elementwise maybe", "false"}}) {
    auto bad = run("predict layer --gpu a100 --model gpt-2.7b --seq 512 --micro-batch 1 " + flags);
    EXPECT_EQ(bad.code, 2) << flags << ": " << bad.out;
    EXPECT_NE(bad.out.find(allowed), std::string::npos) << flags << ": " << bad.out;
  }
  auto contradiction =
      run("predict layer --gpu a100 --model gpt-2.7b --seq 512 --micro-batch 1 --compiled "
          "--fused-elementwise false");
  EXPECT_NE(contradiction.code, 0);
  EXPECT_NE(contradiction.out.find("--fused-elementwise"), std::string::npos) << contradiction.out;
}

TEST(PredictCli, AV100AskedForBf16IsWarnedAndPricedAtItsFp32Rate) {
  const std::string base =
      "predict layer --gpu v100 --model llama-7b --seq 2048 --micro-batch 1 --json --dtype ";
  auto bf16 = run(base + "bf16");
  auto fp16 = run(base + "fp16");
  ASSERT_EQ(bf16.code, 0) << bf16.out;
  // run_combined merges stderr: the warning precedes the record.
  const auto warning = bf16.out.find("warning: V100-SXM2-16GB has no bf16 tensor-core rate");
  EXPECT_NE(warning, std::string::npos) << bf16.out;
  auto record = cephalo::Json::parse(bf16.out.substr(bf16.out.find('{')));
  ASSERT_TRUE(record.contains("warnings"));
  EXPECT_NE(record["warnings"][0].get<std::string>().find("fp16 would run"), std::string::npos);
  auto f16 = cephalo::Json::parse(fp16.out);
  EXPECT_FALSE(f16.contains("warnings"));
  EXPECT_GT(record["forward_ms"].get<double>(), 3 * f16["forward_ms"].get<double>());
}

TEST(PredictCli, AConfigsTorchDtypeIsTheDefaultDtype) {
  auto r = run("predict layer --gpu h100 --model " + kRoot +
               "/scenarios/models/mistral-7b-v0.1.json --seq 8192 --micro-batch 1 --json");
  ASSERT_EQ(r.code, 0) << r.out;  // past the 4096-token window: priced, not refused
  auto j = cephalo::Json::parse(r.out);
  EXPECT_EQ(j["dtype"], "bf16");
  auto catalog = cephalo::Json::parse(
      run("predict layer --gpu h100 --model mistral-7b --seq 8192 --micro-batch 1 --json").out);
  EXPECT_EQ(catalog["dtype"], "fp16");  // a catalog name: the documented default
}

TEST(PredictCli, DescribeAndSimulatePrintTheImplementationTheyPriced) {
  auto describe = run("describe " + kRoot + "/scenarios/h200-gpt1.3b.json");
  ASSERT_EQ(describe.code, 0) << describe.out;
  EXPECT_NE(describe.out.find("implementation: eager, unfused"), std::string::npos) << describe.out;
  EXPECT_NE(describe.out.find("schedule: gathers 1 unit ahead (fsdp2)"), std::string::npos)
      << describe.out;
  // The schedule and the warnings a prediction will carry, in the table and the record.
  auto paper = run("describe " + kRoot + "/scenarios/default.json");
  EXPECT_NE(paper.out.find("warning: P40 has no fp16 tensor-core rate"), std::string::npos)
      << paper.out;
  auto paper_json =
      cephalo::Json::parse(run("describe --json " + kRoot + "/scenarios/default.json").out);
  EXPECT_EQ(paper_json["schedule"], "gathers 1 unit ahead");
  ASSERT_EQ(paper_json["warnings"].size(), 1u);
  auto simulate = run("simulate --scenario " + kRoot + "/scenarios/default.json --plan " + kRoot +
                      "/scenarios/plans/default-even.json");
  ASSERT_EQ(simulate.code, 0) << simulate.out;
  EXPECT_NE(simulate.out.find("implementation flash, fused"), std::string::npos) << simulate.out;
  // The P40 computes fp16 on its fp32 pipeline: said on stderr and in the record.
  EXPECT_NE(simulate.out.find("warning: P40 has no fp16 tensor-core rate"), std::string::npos)
      << simulate.out;
  auto json = run("simulate --json --scenario " + kRoot + "/scenarios/default.json --plan " +
                  kRoot + "/scenarios/plans/default-even.json");
  auto record = cephalo::Json::parse(json.out.substr(json.out.find('{')));
  ASSERT_TRUE(record.contains("warnings")) << json.out;
  EXPECT_NE(record["warnings"][0].get<std::string>().find("P40"), std::string::npos);
}

TEST(PredictCli, BadInputsGiveClearErrors) {
  // Bad flag values are a bad command line: exit 2 (apps/README.md).
  auto gpu = run("predict layer --gpu l44 --model gpt-2.7b --seq 512 --micro-batch 1");
  EXPECT_EQ(gpu.code, 2);
  EXPECT_NE(gpu.out.find("L4"), std::string::npos) << gpu.out;
  auto model = run("predict layer --gpu l4 --model gtp-2.7b --seq 512 --micro-batch 1");
  EXPECT_EQ(model.code, 2);
  EXPECT_NE(model.out.find("gpt-2.7b"), std::string::npos) << model.out;
  // A config path is a model too; a missing one is an I/O error naming it (exit 5).
  auto config = run("predict layer --gpu l4 --model " + kRoot +
                    "/scenarios/models/gpt2.json --seq 512 --micro-batch 1 --json");
  EXPECT_EQ(config.code, 0) << config.out;
  auto no_config =
      run("predict layer --gpu l4 --model /no/such/config.json --seq 512 "
          "--micro-batch 1");
  EXPECT_EQ(no_config.code, 5);
  EXPECT_NE(no_config.out.find("/no/such/config.json"), std::string::npos) << no_config.out;
  // `describe model` with a mistyped name lists close catalog names, not "no such file": a bad
  // argument, as predict layer's --model (exit 2).
  auto describe = run("describe model lama3-8b");
  EXPECT_EQ(describe.code, 2);
  EXPECT_NE(describe.out.find("llama3-8b"), std::string::npos) << describe.out;
  auto mb = run("predict layer --gpu l4 --model gpt-2.7b --seq 512 --micro-batch 0");
  EXPECT_EQ(mb.code, 2);
  EXPECT_NE(mb.out.find("--micro-batch"), std::string::npos) << mb.out;
  auto profile =
      run("predict layer --gpu h100 --model gpt-2.7b --seq 512 --micro-batch 2 "
          "--source profile");
  EXPECT_EQ(profile.code, 3);
  EXPECT_NE(profile.out.find("calibrated"), std::string::npos) << profile.out;
  auto bytes = run("predict collective --scenario " + kRoot +
                   "/scenarios/default.json --kind all-gather --bytes -5");
  EXPECT_EQ(bytes.code, 2);
  auto shares =
      run("predict collective --scenario " + kRoot +
          "/scenarios/default.json --kind all-gather --bytes 1MiB --shares 0.5,0.2,0.2,0.2");
  EXPECT_EQ(shares.code, 2);
  EXPECT_NE(shares.out.find("sum"), std::string::npos) << shares.out;
  // The values are echoed as typed, the sum without rounding noise.
  EXPECT_NE(shares.out.find("got 0.5,0.2,0.2,0.2;"), std::string::npos) << shares.out;
  EXPECT_NE(shares.out.find("sum to 1.1)"), std::string::npos) << shares.out;
}

TEST(PredictCli, CollectiveAndMemoryRecords) {
  auto c = run("predict collective --scenario " + kRoot +
               "/scenarios/default.json --kind all-reduce --bytes 64MiB --json");
  ASSERT_EQ(c.code, 0) << c.out;
  auto j = cephalo::Json::parse(c.out);
  EXPECT_NEAR(j["busbw_bytes_per_s"].get<double>(), j["algbw_bytes_per_s"].get<double>() * 1.5, 1);
  EXPECT_FALSE(j["algorithm"].get<std::string>().empty());
  // Which protocol and how many channels NCCL's tuner (as modelled) took: 64 MiB on the
  // paper's PCIe node is a Simple ring on at least one channel; the table says the same.
  EXPECT_EQ(j["protocol"], "Simple");
  EXPECT_GE(j["channels"].get<int>(), 1);
  auto t = run("predict collective --scenario " + kRoot +
               "/scenarios/default.json --kind all-reduce --bytes 64MiB");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("protocol"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("Simple"), std::string::npos) << t.out;
  auto m = run("predict memory --scenario " + kRoot + "/scenarios/default.json --plan " + kRoot +
               "/scenarios/plans/default-even.json --json");
  ASSERT_EQ(m.code, 0) << m.out;
  auto mj = cephalo::Json::parse(m.out);
  ASSERT_EQ(mj["ranks"].size(), 4u);
  EXPECT_TRUE(mj["ranks"][0]["terms_bytes"].contains("training_state"));
  EXPECT_TRUE(mj["ranks"][0].contains("headroom_bytes"));
}

TEST(PredictCli, LayerOpsAddUpToTheLayerAndPrintARowPerClass) {
  const std::string base =
      "predict layer --gpu h100 --model llama-7b --seq 4096 --dtype bf16 --micro-batch 2 "
      "--compute-model calibrated --ops";
  auto r = run(base + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = cephalo::Json::parse(r.out);
  double f = 0, b = 0;
  for (const auto& c : j["op_classes"]) {
    f += c["forward_ms"].get<double>();
    b += c["backward_ms"].get<double>();
    EXPECT_GT(c["forward_ratio"].get<double>(), 1) << c["name"];
  }
  EXPECT_EQ(j["op_classes"].size(), 4u);
  EXPECT_NEAR(f, j["forward_ms"].get<double>(), 1e-6);  // 1 ns, in ms
  EXPECT_NEAR(b, j["backward_ms"].get<double>(), 1e-6);
  auto text = run(base);
  ASSERT_EQ(text.code, 0) << text.out;
  for (const char* row : {"GEMMs", "attention core", "elementwise", "norms", "layer"})
    EXPECT_NE(text.out.find(row), std::string::npos) << row << "\n" << text.out;
}

TEST(PredictCli, BadFlashKernelExitsTwoNamingTheFlag) {
  const std::string base = "predict layer --gpu h100 --model gpt-2.7b --seq 2048 --micro-batch 1 ";
  auto bad = run(base + "--flash-kernel triton");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--flash-kernel"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("cudnn"), std::string::npos) << bad.out;
  auto eager = run(base + "--attention eager --flash-kernel cudnn");
  EXPECT_EQ(eager.code, 2) << eager.out;
  EXPECT_NE(eager.out.find("--flash-kernel"), std::string::npos) << eager.out;
  auto ok = run(base + "--flash-kernel cudnn --json");
  ASSERT_EQ(ok.code, 0) << ok.out;
  EXPECT_EQ(cephalo::Json::parse(ok.out)["implementation"]["flash_kernel"], "cudnn");
}
