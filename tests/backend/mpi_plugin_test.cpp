// MPI is a plugin loaded only when a process asks for it (backend/include/cephalo/backend/
// mpi_plugin.hpp): the CLI links no MPI library, a simulator command loads none, and a missing or
// foreign plugin is refused naming its path and the loader's reason. Runs under mpirun that
// load the plugin are the mpi label's suites.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../support/run_command.hpp"
#include "cephalo/backend/mpi_communicator.hpp"
#include "cephalo/core/error.hpp"
#include "mpi_plugin.hpp"

namespace cb = cephalo::backend;

namespace {

std::string failure_of(const std::filesystem::path& path) {
  try {
    cb::open_mpi_plugin(path);
  } catch (const cephalo::RuntimeFailure& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kMpiLibraries[] = {"libmpi", "libopen-rte", "libopen-pal", "libpmix"};

}  // namespace

TEST(MpiPlugin, TheCliLinksNoMpiLibrary) {
  const auto ldd = cephalo::test_support::run_command(std::string("ldd ") + CEPHALO_CLI);
  if (ldd.code != 0) GTEST_SKIP() << "ldd did not run here: " << ldd.err;
  ASSERT_NE(ldd.out.find("libc.so"), std::string::npos) << ldd.out;  // it listed something
  for (const char* lib : kMpiLibraries)
    EXPECT_EQ(ldd.out.find(lib), std::string::npos) << lib << " in\n" << ldd.out;
}

TEST(MpiPlugin, SimulatorCommandsLoadNoMpiLibrary) {
  // The loader's own record of every object it opened (dlopen()s included) goes to stderr.
  const std::string cli = CEPHALO_CLI;
  const std::string scenario = std::string(CEPHALO_SOURCE_DIR) + "/scenarios/default.json";
  const std::string plan = std::string(CEPHALO_SOURCE_DIR) + "/scenarios/plans/default-even.json";
  for (const std::string& args :
       {"validate " + scenario, "simulate --scenario " + scenario + " --plan " + plan}) {
    const auto r = cephalo::test_support::run_command("LD_DEBUG=files " + cli + " " + args);
    ASSERT_EQ(r.code, 0) << args << "\n" << r.err;
    ASSERT_NE(r.err.find("libc.so"), std::string::npos) << r.err;  // the record is there
    for (const char* lib : kMpiLibraries)
      EXPECT_EQ(r.err.find(lib), std::string::npos) << args << " loaded " << lib;
    EXPECT_EQ(r.err.find(cb::kMpiPluginFile), std::string::npos) << args;
  }
}

TEST(MpiPlugin, AMissingPluginIsRefusedNamingItsPath) {
  const std::string msg = failure_of("/nonexistent/dir/libcephalo_mpi.so");
  EXPECT_NE(msg.find("MPI: the MPI plugin /nonexistent/dir/libcephalo_mpi.so is missing"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(cb::kMpiPluginEnv), std::string::npos) << msg;
}

TEST(MpiPlugin, ALibraryOfAnotherKindIsNotAnMpiPlugin) {
  // A CUDA plugin's stand-in: a loadable library without the MPI plugin's symbols.
  const std::string msg = failure_of(CEPHALO_FAKE_PLUGIN_WRONG_ABI);
  EXPECT_NE(msg.find(std::string(CEPHALO_FAKE_PLUGIN_WRONG_ABI) + " is not a cephalo MPI plugin"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(cb::kMpiPluginAbiSymbol), std::string::npos) << msg;
}

TEST(MpiPlugin, TheBuiltPluginLoads) {
  // Loading initialises nothing: MPI starts in MpiLibrary::init, which this test does not call.
  EXPECT_NO_THROW(cb::open_mpi_plugin(CEPHALO_MPI_PLUGIN_FILE));
}

TEST(MpiPlugin, ARuntimeOutsideALauncherStartsNoMpi) {
  // `cephalo run` / `profile` / `sweep` without mpirun: one process, MPI never started.
  if (cb::MpiRuntime::launched_by_mpirun()) GTEST_SKIP() << "this test runs under a launcher";
  const cb::MpiRuntime mpi(nullptr, nullptr, /*only_under_launcher=*/true);
  EXPECT_FALSE(mpi.initialized());
  EXPECT_EQ(mpi.world_size(), 1);
  EXPECT_EQ(mpi.gather_strings_to_root("row"), std::vector<std::string>{"row"});
}
