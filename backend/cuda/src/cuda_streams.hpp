#pragma once
// Internal to the CUDA device (cuda_device.cpp): its streams and events, backend::Stream and
// backend::Event over cudaStream_t / cudaEvent_t, and the argument conversions its kernel
// calls share. Apart from the device class so that file holds one job: the device's memory,
// runtime and kernel dispatch.
#include <cuda_runtime.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "cephalo/backend/cuda/check.hpp"
#include "cephalo/backend/cuda/kernels.hpp"
#include "cephalo/backend/device.hpp"
#include "cephalo/core/error.hpp"

namespace cephalo::cuda::device_detail {

using backend::ElemType;
using backend::StreamKind;

inline Dtype dtype_of(ElemType t) {
  switch (t) {
    case ElemType::F32:
      return Dtype::FP32;
    case ElemType::BF16:
      return Dtype::BF16;
    case ElemType::F16:
      return Dtype::FP16;
    case ElemType::I32:
      break;
  }
  throw Error(std::string("cuda device: element type ") + backend::to_string(t) +
              " is not a floating type");
}

inline void expect(bool ok, const std::string& what) {
  if (!ok) throw Error("cuda device: " + what);
}

inline int as_int(std::int64_t v, const char* name) {
  expect(v > 0 && v <= 0x7fffffff, std::string(name) + " out of range: " + std::to_string(v));
  return static_cast<int>(v);
}

class CudaStream final : public backend::Stream {
 public:
  CudaStream(StreamKind kind, int priority) : kind_(kind) {
    CEPHALO_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
  }
  ~CudaStream() override {
    if (stream_) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
  }
  StreamKind kind() const override { return kind_; }
  void synchronize() override {
    CEPHALO_CUDA_CHECK(cudaStreamSynchronize(stream_));
    rethrow();
  }
  void enqueue_host(std::function<void()> fn) override {
    auto* job = new Job{this, std::move(fn)};
    const cudaError_t status = cudaLaunchHostFunc(stream_, &CudaStream::run_job, job);
    if (status != cudaSuccess) {
      delete job;
      CEPHALO_CUDA_CHECK(status);
    }
  }
  void wait(backend::Event& event) override;
  cudaStream_t native() const { return stream_; }
  void rethrow() {
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::swap(e, failure_);
    }
    if (e) std::rethrow_exception(e);
  }

 private:
  struct Job {
    CudaStream* stream;
    std::function<void()> fn;
  };
  // Host functions run on a CUDA-internal thread and must not call CUDA; a throwing function
  // is recorded and re-thrown by the next synchronize() (device.hpp's contract).
  static void CUDART_CB run_job(void* data) {
    std::unique_ptr<Job> job(static_cast<Job*>(data));
    try {
      job->fn();
    } catch (...) {
      std::lock_guard<std::mutex> lock(job->stream->mutex_);
      if (!job->stream->failure_) job->stream->failure_ = std::current_exception();
    }
  }
  StreamKind kind_;
  cudaStream_t stream_ = nullptr;
  std::mutex mutex_;
  std::exception_ptr failure_;
};

class CudaEvent final : public backend::Event {
 public:
  CudaEvent() { CEPHALO_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~CudaEvent() override {
    if (event_) cudaEventDestroy(event_);
  }
  void record(backend::Stream& stream) override {
    recorded_on_ = dynamic_cast<CudaStream*>(&stream);
    expect(recorded_on_ != nullptr, "event recorded on a stream of another device");
    CEPHALO_CUDA_CHECK(cudaEventRecord(event_, recorded_on_->native()));
  }
  bool query() override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    CEPHALO_CUDA_CHECK(status);
    return true;
  }
  void synchronize() override {
    CEPHALO_CUDA_CHECK(cudaEventSynchronize(event_));
    if (recorded_on_) recorded_on_->rethrow();
  }
  double seconds_since(backend::Event& start) override {
    auto* s = dynamic_cast<CudaEvent*>(&start);
    expect(s != nullptr, "seconds_since with an event of another device");
    float ms = 0.0f;
    CEPHALO_CUDA_CHECK(cudaEventElapsedTime(&ms, s->event_, event_));
    return ms * 1e-3;
  }
  cudaEvent_t native() const { return event_; }

 private:
  CudaStream* recorded_on_ = nullptr;
  cudaEvent_t event_ = nullptr;
};

inline void CudaStream::wait(backend::Event& event) {
  auto* e = dynamic_cast<CudaEvent*>(&event);
  expect(e != nullptr, "stream waits on an event of another device");
  CEPHALO_CUDA_CHECK(cudaStreamWaitEvent(stream_, e->native(), 0));
}

}  // namespace cephalo::cuda::device_detail
