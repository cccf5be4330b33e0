#pragma once
// AdamW's hyper-parameters as every device's optimizer kernel takes them (the CPU kernels, the
// CUDA kernels behind the plugin and their tests): one struct, so no two defaults can differ.
// The defaults are PyTorch's torch.optim.AdamW except the learning rate; a run always sets
// them from the job's optimizer (optimizer.cpp). Plain C++17: the CUDA kernels' nvcc
// translation unit includes it.
#include <cstdint>

namespace cephalo::backend {

struct AdamWParams {
  float lr = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  std::int64_t step = 1;  // 1-based, for bias correction
};

}  // namespace cephalo::backend
