// Broken stand-ins for libcephalo_cuda.so, one per failure path of open_cuda_plugin
// (backend/src/runtime.cpp), chosen by a compile definition:
//   FAKE_PLUGIN_NO_ABI     exports the factory but no interface-version symbol
//   FAKE_PLUGIN_WRONG_ABI  reports an interface version this cephalo does not have
//   FAKE_PLUGIN_NO_MAKE    the right version, no factory
#include "cephalo/backend/cuda_plugin.hpp"

namespace cb = cephalo::backend;

extern "C" {
#if !defined(FAKE_PLUGIN_NO_ABI)
__attribute__((visibility("default"))) int cephalo_cuda_plugin_abi() {
#if defined(FAKE_PLUGIN_WRONG_ABI)
  return cb::kCudaPluginAbi + 1;
#else
  return cb::kCudaPluginAbi;
#endif
}
#endif
#if !defined(FAKE_PLUGIN_NO_MAKE)
__attribute__((visibility("default"))) void cephalo_cuda_plugin_make(const cb::CudaPluginRequest&,
                                                                     cb::CudaPluginParts&) {}
#endif
}
