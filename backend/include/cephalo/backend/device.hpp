#pragma once
// The device API of the execution backend (DESIGN §7), in two halves: DeviceRuntime
// (device_runtime.hpp: streams, events, allocation, copies) and DeviceKernels
// (device_kernels.hpp: the transformer kernels). A Device is both. Abstract classes with
// non-virtual validating front functions (library cephalo::backend_api, src/device.cpp) so that
// the CPU device (this library) and the CUDA device (backend/cuda/, a separate library) both
// implement them without a dependency cycle, and no device repeats the precondition checks. The
// executor only ever talks to these interfaces; switching from CPU to CUDA means handing it a
// different Device and Communicator.
//
// Ordering model (the same on both devices):
//   * A Stream is an in-order queue. Work submitted to one stream runs in submission order.
//     Work on different streams may overlap; order across streams only via Events.
//   * CPU: the compute stream runs kernels inline on the calling thread (so "submitted" means
//     "done" when the call returns); the comm and copy streams are worker threads.
//     CUDA: streams are cudaStream_t, kernels are launched asynchronously.
//   * Event::record(stream) marks a point in a stream; stream.wait(event) makes later work on
//     that stream wait for it; event.synchronize() blocks the host. Events also time: the
//     seconds between two recorded events (steady clock on CPU, cudaEvent on GPU).
//   * Errors raised by queued work (an MPI failure on the comm thread, a CUDA error) are
//     re-thrown as RuntimeFailure by the next synchronize() of that stream or event.
//
// Memory model: every allocation goes through Device::allocate, which accounts bytes per
// memory space, so the executor reports the true peak of what it allocated (weights, gathered
// units, gradients, activations, optimizer state). Buffers are RAII and free on destruction.
//
// Element types and kernel shapes: device_kernels.hpp.
#include <string>

#include "cephalo/backend/device_kernels.hpp"
#include "cephalo/backend/device_runtime.hpp"

namespace cephalo::backend {

class Device : public DeviceRuntime, public DeviceKernels {
 public:
  ~Device() override = default;
  // One kind for both halves (this declaration overrides both).
  std::string kind() const override = 0;
};

}  // namespace cephalo::backend
