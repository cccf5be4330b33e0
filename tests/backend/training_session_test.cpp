// The training session in one process (single-rank communicator, CPU device): checkpoint
// cadence, resume = uninterrupted run, the report window, agreement on failures before
// training, and the abort policy of a one-rank job.
#include "cephalo/backend/training_session.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cephalo/backend/cpu_device.hpp"
#include "cephalo/costmodels/catalog.hpp"
#include "single_rank_communicator.hpp"

namespace fs = std::filesystem;
using namespace cephalo;
using namespace cephalo::backend;

namespace {

const std::string kSrc = CEPHALO_SOURCE_DIR;

struct TempDir {
  fs::path path =
      fs::temp_directory_path() / ("cephalo-session-" + std::to_string(::getpid()) + "-" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// gpt-tiny on one CPU rank, everything a session needs.
struct OneRank {
  Scenario sc = costmodels::load_scenario(kSrc + "/scenarios/cpu-1rank.json");
  Plan plan = load_plan(kSrc + "/scenarios/plans/cpu-1rank-full.json");
  traces::TrainingGraph graph = traces::build_training_graph(plan, sc);
  std::unique_ptr<Device> dev = make_cpu_device({});
  std::unique_ptr<Communicator> comm = make_single_rank_communicator(*dev);
  ExecutorOptions eopt;

  std::function<std::unique_ptr<Executor>()> factory() {
    return [this] {
      return std::make_unique<Executor>(sc, plan, graph,
                                        GptConfig::from_spec(sc.job.model, sc.job.sequence_length),
                                        *dev, *comm, eopt);
    };
  }
  // Trains with these options and returns the final parameters.
  std::vector<float> train(const SessionOptions& o, SessionResult* result = nullptr) {
    TrainingSession session(*comm, o);
    session.prepare(factory());
    auto r = session.run([](const StepResult&) {});
    if (result) *result = r;
    return session.executor().gather_parameters();
  }
};

double relative(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

}  // namespace

TEST(TrainingSession, CheckpointCadenceAndResumeEqualTheUninterruptedRun) {
  TempDir dir;
  OneRank job;
  SessionOptions full;
  full.steps = 4;
  SessionResult r;
  const auto uninterrupted = job.train(full, &r);
  ASSERT_EQ(r.steps.size(), 4u);
  // The first step is left out of the report window.
  EXPECT_EQ(r.window_first, 1);
  EXPECT_EQ(r.window_last, 3);

  SessionOptions first;
  first.steps = 3;
  first.checkpoint_dir = dir.path / "ck";
  first.checkpoint_every = 2;
  const auto at3 = job.train(first);
  EXPECT_TRUE(fs::exists(dir.path / "ck" / "step_00000002" / "manifest.json"));
  EXPECT_FALSE(fs::exists(dir.path / "ck" / "step_00000003"));  // 3 is not a multiple of 2
  SessionOptions second;
  second.steps = 4;
  second.resume = dir.path / "ck";
  const auto resumed = job.train(second, &r);
  EXPECT_EQ(r.steps.front().step, 2);
  EXPECT_LT(relative(resumed, uninterrupted), 1e-6);
  // The comparison can fail: the run stopped at step 3 is not the one at 4.
  EXPECT_GT(relative(at3, uninterrupted), 1e-4);
}

TEST(TrainingSession, FailuresBeforeTrainingAreAgreedWithTheirKind) {
  TempDir dir;
  OneRank job;
  SessionOptions o;
  o.steps = 2;
  std::ofstream(dir.path / "file") << "x";
  o.checkpoint_dir = dir.path / "file";  // a file, not a folder
  o.checkpoint_every = 1;
  TrainingSession session(*job.comm, o);
  try {
    session.prepare(job.factory());
    ADD_FAILURE() << "a file was accepted as checkpoint folder";
  } catch (const AgreedFailure& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_EQ(e.failed_rank(), 0);
    EXPECT_NE(std::string(e.what()).find("not a folder"), std::string::npos) << e.what();
  }
  // An infeasible precision is refused with its own kind, before any step.
  job.sc.job.precision.params = Dtype::BF16;
  TrainingSession infeasible(*job.comm, SessionOptions{});
  try {
    infeasible.prepare(job.factory());
    ADD_FAILURE() << "bf16 master weights were accepted";
  } catch (const AgreedFailure& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Infeasible) << e.what();
  }
  EXPECT_THROW(TrainingSession(*job.comm,
                               [] {
                                 SessionOptions bad;
                                 bad.checkpoint_every = 2;  // no folder
                                 return bad;
                               }()),
               RuntimeFailure);
}

TEST(TrainingSession, AFailingStepOfAOneRankJobIsRethrown) {
  OneRank job;
  job.eopt.fail_at_step = 1;
  SessionOptions o;
  o.steps = 3;
  TrainingSession session(*job.comm, o);
  session.prepare(job.factory());
  int seen = 0;
  try {
    session.run([&](const StepResult&) { ++seen; });
    ADD_FAILURE() << "the injected failure did not surface";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("injected failure at step 1"), std::string::npos);
  }
  EXPECT_EQ(seen, 1);
}

TEST(TrainingSession, ReportStepIsTheMedianFastestOrLastOfTheWindow) {
  std::deque<MeasuredStep> w;
  for (auto [step, t] : {std::pair{1, 3.0}, {2, 1.0}, {3, 2.0}, {4, 5.0}}) {
    MeasuredStep m;
    m.step = step;
    m.time_s = t;
    w.push_back(m);
  }
  EXPECT_EQ(pick_report_step(w, "median").step, 3);  // lower median of 1, 2, 3, 5
  EXPECT_EQ(pick_report_step(w, "min").step, 2);
  EXPECT_EQ(pick_report_step(w, "last").step, 4);
}

// What `cephalo run` loads before any compute: the plan checked for the scenario and one rank
// per process; the emulated cluster's labels and notes; the reported step's label.
TEST(RunSetup, InputsAreCheckedAndOneRankPerProcessIsRequired) {
  RunRequest r;
  r.scenario_file = kSrc + "/scenarios/cpu-2rank-emulated.json";
  r.plan_file = kSrc + "/scenarios/plans/cpu-2rank-emulated.json";
  const RunSetup s = load_run_inputs(r, 2);
  EXPECT_EQ(s.plan.ranks.size(), 2u);
  EXPECT_THROW(load_run_inputs(r, 1), ValidationError);
  const RunOptions o = run_options(s, r.settings, 1, 0);
  EXPECT_NE(o.session.rank_label.find("emulated"), std::string::npos);
  EXPECT_EQ(o.executor.slowdown, s.scenario.cluster.ranks()[1].slot->slowdown);
  const auto notes = run_notes(s.scenario, "cpu");
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes.back().rfind("EMULATION", 0), 0u);
  SessionResult result;
  result.reported.step = 7;
  result.window_size = 1;
  EXPECT_EQ(reported_step_label(result, "median"), "step 7");
  result.window_size = 9;
  result.window_first = 1;
  result.window_last = 9;
  EXPECT_EQ(reported_step_label(result, "min"), "step 7 (min step time of steps 1-9)");
}

// A job that declares another stack's weight-gradient path (Megatron's main_grad) is priced by
// plan and simulate for a run this backend does not do (it accumulates its own way), so `cephalo
// run` refuses it before any training, naming the file, the key, the value and what it takes.
TEST(RunSetup, AnotherStacksWeightGradientPathIsRefused) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("cephalo-run-wgrad-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  RunRequest r;
  r.scenario_file = (dir / "s.json").string();
  r.plan_file = kSrc + "/scenarios/plans/cpu-2rank-emulated.json";
  std::ofstream(r.scenario_file) << R"({"name": "cpu-2rank-emulated",
    "cluster": {"name": "cpu-2-emulated", "nodes": [{"name": "host",
      "gpus": ["cpu", {"type": "cpu", "slowdown": 2.0}],
      "intra_link": {"kind": "shm", "bandwidth": "5GB/s", "latency": "2us"}}]},
    "job": {"model": "gpt-tiny", "sequence_length": 16, "global_batch": 9,
            "precision": {"params": "fp32", "compute": "fp32", "reduce": "fp32"},
            "implementation": {"attention": "eager", "fused_elementwise": false,
                               "weight_gradients": "main_grad"}}})";
  try {
    load_run_inputs(r, 2);
    ADD_FAILURE() << "accepted a main_grad job";
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    for (const char* w : {"s.json", "job.implementation.weight_gradients", "main_grad", "autocast"})
      EXPECT_NE(what.find(w), std::string::npos) << w << ": " << what;
  }
  std::filesystem::remove_all(dir);
}
