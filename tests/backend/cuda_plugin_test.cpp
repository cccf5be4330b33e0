// The CUDA backend is a plugin loaded only for --device cuda (backend/src/runtime.cpp): the CLI
// links no CUDA, a missing or broken plugin is refused naming its path and the loader's reason,
// and a built plugin loads (then builds the device, or fails with CUDA's own reason).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "../support/run_command.hpp"
#include "cephalo/backend/cuda_plugin.hpp"
#include "cephalo/backend/runtime.hpp"
#include "cephalo/core/error.hpp"

namespace cb = cephalo::backend;
namespace fs = std::filesystem;

namespace {

std::string failure_of(const fs::path& path) {
  try {
    cb::open_cuda_plugin(path);
  } catch (const cephalo::RuntimeFailure& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CudaPlugin, TheCliLinksNoCudaNcclOrCublas) {
  const auto ldd = cephalo::test_support::run_command(std::string("ldd ") + CEPHALO_CLI);
  if (ldd.code != 0) GTEST_SKIP() << "ldd did not run here: " << ldd.err;
  ASSERT_NE(ldd.out.find("libc.so"), std::string::npos) << ldd.out;  // it listed something
  for (const char* lib : {"libcudart", "libcublas", "libnccl", "libcuda.so"})
    EXPECT_EQ(ldd.out.find(lib), std::string::npos) << lib << " in\n" << ldd.out;
}

TEST(CudaPlugin, AMissingPluginIsRefusedNamingItsPath) {
  const std::string msg = failure_of("/nonexistent/dir/libcephalo_cuda.so");
  EXPECT_NE(msg.find("/nonexistent/dir/libcephalo_cuda.so"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--device cuda"), std::string::npos) << msg;
}

TEST(CudaPlugin, AFileThatIsNoLibraryIsRefusedWithTheLoadersReason) {
  const fs::path bad =
      fs::temp_directory_path() / ("cephalo-bad-plugin-" + std::to_string(::getpid()) + ".so");
  std::ofstream(bad) << "not an ELF file\n";
  const std::string msg = failure_of(bad);
  fs::remove(bad);
  EXPECT_NE(msg.find("cannot load the CUDA backend plugin " + bad.string()), std::string::npos)
      << msg;
  // dlerror()'s text follows the path (glibc: "<path>: file too short" or "invalid ELF header").
  EXPECT_GT(msg.size(), msg.find(bad.string()) + bad.string().size() + 2) << msg;
}

TEST(CudaPlugin, ALibraryWithoutTheVersionSymbolIsNotAPlugin) {
  const std::string msg = failure_of(CEPHALO_FAKE_PLUGIN_NO_ABI);
  EXPECT_NE(msg.find(std::string(CEPHALO_FAKE_PLUGIN_NO_ABI) + " is not a cephalo CUDA plugin"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("cephalo_cuda_plugin_abi"), std::string::npos) << msg;
}

TEST(CudaPlugin, APluginOfAnotherInterfaceVersionIsRefusedWithBothVersions) {
  const std::string msg = failure_of(CEPHALO_FAKE_PLUGIN_WRONG_ABI);
  const std::string want = std::string(CEPHALO_FAKE_PLUGIN_WRONG_ABI) +
                           " was built for plugin interface " +
                           std::to_string(cb::kCudaPluginAbi + 1) + ", this cephalo needs " +
                           std::to_string(cb::kCudaPluginAbi);
  EXPECT_NE(msg.find(want), std::string::npos) << msg;
}

TEST(CudaPlugin, APluginWithoutTheFactoryIsRefusedNamingIt) {
  const std::string msg = failure_of(CEPHALO_FAKE_PLUGIN_NO_MAKE);
  EXPECT_NE(msg.find(std::string(CEPHALO_FAKE_PLUGIN_NO_MAKE) + " lacks cephalo_cuda_plugin_make"),
            std::string::npos)
      << msg;
}

TEST(CudaPlugin, ARunWithAMissingPluginExitsWithARuntimeFailure) {
  // Appended piece by piece: GCC 12 at -O3 reports a false out-of-bounds memcpy in libstdc++
  // for a chain of `+` over literal-built strings (tests/support/run_command.hpp).
  std::string args = "run --device cuda --scenario ";
  args += CEPHALO_SOURCE_DIR;
  args += "/scenarios/cpu-1rank.json --plan ";
  args += CEPHALO_SOURCE_DIR;
  args += "/scenarios/plans/cpu-1rank-full.json --steps 1";
  const auto r =
      cephalo::test_support::run_command("CEPHALO_CUDA_PLUGIN=/nonexistent/libcephalo_cuda.so " +
                                         cephalo::test_support::cephalo_command(args));
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/libcephalo_cuda.so"), std::string::npos) << r.err;
}

#ifdef CEPHALO_CUDA_PLUGIN_FILE
TEST(CudaPlugin, TheBuiltPluginLoadsAndMakesADeviceOrSaysWhyCudaCannot) {
  cb::CudaPluginMakeFn make = nullptr;
  ASSERT_NO_THROW(make = cb::open_cuda_plugin(CEPHALO_CUDA_PLUGIN_FILE));
  ASSERT_NE(make, nullptr);
  cb::CudaPluginParts parts;
  try {
    make(cb::CudaPluginRequest{}, parts);
  } catch (const cephalo::RuntimeFailure& e) {  // a typed error from inside the plugin
    EXPECT_EQ(parts.device, nullptr);
    GTEST_SKIP() << "plugin loaded; no usable GPU: " << e.what();
  }
  ASSERT_NE(parts.device, nullptr);
  EXPECT_EQ(parts.device->kind(), "cuda");
  EXPECT_EQ(parts.nccl, nullptr);  // no bootstrap communicator, no NCCL
}
#endif
