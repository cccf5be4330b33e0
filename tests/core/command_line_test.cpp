// The command line's one convention: a bad flag value exits 2 in every command, with a message
// naming the flag, the value and what is allowed; a mistyped command gets a suggestion.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../support/run_command.hpp"

namespace {

const std::string kRoot = CEPHALO_SOURCE_DIR;
const std::string kScenario = kRoot + "/scenarios/default.json";
const std::string kPlan = kRoot + "/scenarios/plans/default-even.json";

using Outcome = cephalo::test_support::CliOutput;
using cephalo::test_support::run_cephalo;

struct BadFlag {
  std::string args;                    // the command line after `cephalo`
  std::vector<std::string> fragments;  // all must appear in the message
};

TEST(CommandLine, BadFlagValuesExitTwoNamingFlagValueAndAllowed) {
  const std::string sp = " --scenario " + kScenario + " --plan " + kPlan;
  const std::vector<BadFlag> cases = {
      {"run" + sp + " --steps 1e3", {"--steps", "\"1e3\"", "not an integer", "from 1 to 1000000"}},
      {"run" + sp + " --steps 0", {"--steps", "\"0\"", "from 1 to 1000000"}},
      {"run" + sp + " --threads -3", {"--threads", "\"-3\"", "from 1 to 1024"}},
      {"run" + sp + " --seed 18446744073709551616", {"--seed", "64 bits"}},
      {"run" + sp + " --seed -1", {"--seed", "\"-1\""}},
      {"run" + sp + " --device gpu", {"--device", "\"gpu\"", "cpu, cuda"}},
      {"run" + sp + " --checkpoint-every 2.5", {"--checkpoint-every", "not an integer"}},
      {"profile --model gpt-tiny --seq 0", {"--seq", "\"0\"", "from 1 to"}},
      {"profile --model gpt-tiny --seq 8 --threads -3", {"--threads", "\"-3\"", "from 1 to 1024"}},
      {"profile --model gpt-tiny --seq 8 --statistic mean", {"--statistic", "median, min"}},
      {"profile --model gpt-tiny --seq 8 --dtype fp8", {"--dtype", "\"fp8\"", "bf16"}},
      {"simulate" + sp + " --queue fibonacci", {"--queue", "\"fibonacci\"", "binary-heap"}},
      {"simulate" + sp + " --compute-model fast", {"--compute-model", "\"fast\"", "roofline"}},
      {"plan --scenario " + kScenario + " --strategy evne", {"--strategy", "\"evne\"", "even"}},
      {"describe model", {"model", "catalog model name", "config.json"}},
      {"plan --scenario " + kScenario + " --compute-model x", {"--compute-model", "roofline"}},
      {"sweep --spec " + kRoot + "/scenarios/sweeps/gpt2.7b-mixes.json --sort price",
       {"--sort", "\"price\"", "tokens-per-dollar, throughput, cost, mix"}},
      // The old names stay accepted (hidden) and their messages still name the flag given.
      {"plan --scenario " + kScenario + " --compute-source x", {"--compute-source", "roofline"}},
      {"predict layer --gpu l4 --model gpt-2.7b --seq 512 --micro-batch 1 --source fast",
       {"--source", "\"fast\"", "auto, profile, calibrated, roofline"}},
      {"predict layer --gpu l4 --model gpt-2.7b --seq 0 --micro-batch 1", {"--seq", "\"0\""}},
      {"predict layer --gpu l4 --model gpt-2.7b --seq 512 --micro-batch 1 --dtype fp7",
       {"--dtype", "\"fp7\""}},
      {"predict layer --gpu l44x --model gpt-2.7b --seq 512 --micro-batch 1",
       {"--gpu", "\"l44x\"", "closest"}},
      {"predict layer --gpu l4 --model gpt-2.7b --seq 100000 --micro-batch 1",
       {"--seq", "100000", "2048"}},
      {"predict collective --scenario " + kScenario + " --kind gather --bytes 1MiB",
       {"--kind", "\"gather\"", "all-gather"}},
      {"predict collective --scenario " + kScenario +
           " --kind all-gather --bytes 1MiB "
           "--uneven even",
       {"--uneven", "\"even\"", "grouped, padded"}},
      {"predict collective --scenario " + kScenario + " --kind all-gather --bytes lots",
       {"--bytes", "lots"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    Outcome o = run_cephalo(c.args);
    EXPECT_EQ(o.exit_code, 2) << o.output;
    for (const auto& f : c.fragments) EXPECT_NE(o.output.find(f), std::string::npos) << o.output;
  }
}

TEST(CommandLine, MissingRequiredFlagStillSaysRequired) {
  Outcome o = run_cephalo("profile --model gpt-tiny");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("--seq is required"), std::string::npos) << o.output;
}

TEST(CommandLine, MistypedCommandGetsASuggestion) {
  Outcome o = run_cephalo("simulat --scenario x --plan y");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("did you mean \"simulate\""), std::string::npos) << o.output;
  o = run_cephalo("predict laye --gpu l4");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("did you mean \"layer\""), std::string::npos) << o.output;
  // Known commands and plain help are left to CLI11.
  EXPECT_EQ(run_cephalo("--help").exit_code, 0);
  EXPECT_EQ(run_cephalo("describe gpus").exit_code, 0);
}

// main() registers only the command argv[1] names: the root help still lists every command,
// and a word that names another command is, after the first, an argument like any other.
TEST(CommandLine, TheCommandNamedFirstParsesAsAmongAll) {
  Outcome o = run_cephalo("--help");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  for (const char* command : {"describe", "validate", "plan", "sweep", "predict", "simulate", "run",
                              "compare", "profile", "calibrate"})
    EXPECT_NE(o.output.find(std::string("\n  ") + command + " "), std::string::npos) << command;
  o = run_cephalo("validate simulate");  // a file named "simulate"
  EXPECT_EQ(o.exit_code, 5) << o.output;
  EXPECT_NE(o.output.find("simulate: no such file"), std::string::npos) << o.output;
  o = run_cephalo("simulate --scenario " + kScenario + " --plan " + kPlan + " plan");
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("not expected: plan"), std::string::npos) << o.output;
  o = run_cephalo("--version");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(o.output.rfind("cephalo ", 0), 0u) << o.output;
}

// One name per option across commands; exit codes and the old names as the help shows them.
TEST(CommandLine, EveryCommandTakesComputeModelAndItsHelpListsTheExitCodes) {
  for (const std::string command :
       {"plan", "simulate", "predict", "predict layer", "predict memory", "predict collective",
        "predict 3d", "sweep", "run", "profile", "profile validate", "describe", "compare",
        "validate", "calibrate", "calibrate stack"}) {
    SCOPED_TRACE(command);
    Outcome o = run_cephalo(command + " --help");
    EXPECT_EQ(o.exit_code, 0) << o.output;
    EXPECT_NE(o.output.find("Exit codes: 0 ok, 1 invalid input"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("3 infeasible request"), std::string::npos) << o.output;
    EXPECT_EQ(o.output.find("--compute-source"), std::string::npos) << o.output;
    EXPECT_EQ(o.output.find("--source "), std::string::npos) << o.output;
    if (command == "plan" || command == "simulate" || command == "predict layer") {
      EXPECT_NE(o.output.find("--compute-model"), std::string::npos) << o.output;
    }
  }
  // The alias writes the same value as the new name: both plans predict the same time, and
  // one other than the default compute model's.
  const auto predicted = [](const std::string& flags) {
    const Outcome o =
        run_cephalo("plan --json --strategy even " + flags + " --scenario " + kScenario);
    EXPECT_EQ(o.exit_code, 0) << o.output;
    const auto at = o.output.find("\"predicted_iteration_s\"");
    return at == std::string::npos ? std::string("none") : o.output.substr(at, 48);
  };
  const auto by_new = predicted("--compute-model roofline");
  EXPECT_NE(by_new, "none");
  EXPECT_EQ(by_new, predicted("--compute-source roofline"));
  EXPECT_NE(by_new, predicted("--compute-model auto"));
}

TEST(CommandLine, GoodValuesStillPass) {
  Outcome o = run_cephalo(
      "predict layer --gpu l4 --model gpt-2.7b --seq 512 --micro-batch 2 "
      "--dtype float16 --source roofline --json");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  o = run_cephalo("simulate --queue pairing-heap --compute-model roofline --scenario " + kScenario +
                  " --plan " + kPlan);
  EXPECT_EQ(o.exit_code, 0) << o.output;
}

}  // namespace
