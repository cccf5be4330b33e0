// `cephalo predict` end to end: JSON keys, exit codes and messages for bad input.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "cephalo/core/json_reader.hpp"

#include "../support/run_command.hpp"

namespace {

struct Result {
  int code = 0;
  std::string out;
};

Result run(const std::string& args) {
  auto r = cephalo::test_support::run_combined(std::string(CEPHALO_CLI) + " " + args);
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
  // `describe model` with a mistyped name lists close catalog names, not "no such file".
  auto describe = run("describe model lama3-8b");
  EXPECT_EQ(describe.code, 1);
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
  auto m = run("predict memory --scenario " + kRoot + "/scenarios/default.json --plan " + kRoot +
               "/scenarios/plans/default-even.json --json");
  ASSERT_EQ(m.code, 0) << m.out;
  auto mj = cephalo::Json::parse(m.out);
  ASSERT_EQ(mj["ranks"].size(), 4u);
  EXPECT_TRUE(mj["ranks"][0]["terms_bytes"].contains("training_state"));
  EXPECT_TRUE(mj["ranks"][0].contains("headroom_bytes"));
}
