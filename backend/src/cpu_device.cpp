#include "cpu_device_impl.hpp"

namespace cephalo::backend {

std::unique_ptr<Device> make_cpu_device(const CpuDeviceOptions& options) {
  return std::make_unique<cpu_detail::CpuDevice>(options);
}

}  // namespace cephalo::backend
