// The CPU device (cpu_device_impl.hpp): factory, runtime part, element-type helpers and the
// BLAS-like kernels; the transformer kernels are in cpu_transformer_kernels.cpp.
#include <algorithm>
#include <cstring>

#include "cephalo/core/error.hpp"
#include "cpu_device_impl.hpp"
#include "half.hpp"

namespace cephalo::backend {

std::unique_ptr<Device> make_cpu_device(const CpuDeviceOptions& options) {
  return std::make_unique<cpu_detail::CpuDevice>(options);
}

}  // namespace cephalo::backend

namespace cephalo::backend::cpu_detail {

Fp32In::Fp32In(const TensorRef& t, std::int64_t n) {
  if (t.type == ElemType::F32) {
    p_ = t.f32();
    return;
  }
  copy_.resize(static_cast<std::size_t>(n));
  load_f32(t.data, t.type, copy_.data(), copy_.size());
  p_ = copy_.data();
}

Fp32Out::Fp32Out(const TensorRef& t, std::int64_t n, Start start) : t_(t) {
  if (t.type == ElemType::F32) {
    p_ = t.f32();
    return;
  }
  scratch_.resize(static_cast<std::size_t>(n));
  if (start == Start::Current) load_f32(t.data, t.type, scratch_.data(), scratch_.size());
  p_ = scratch_.data();
}

void Fp32Out::commit() const {
  if (t_.type != ElemType::F32) store_f32(scratch_.data(), t_.data, t_.type, scratch_.size());
}

CpuDevice::CpuDevice(const CpuDeviceOptions& o)
    : options_(o),
      compute_(StreamKind::Compute, false),
      comm_(StreamKind::Comm, true),
      copy_(StreamKind::Copy, true),
      send_(StreamKind::Send, true),
      recv_(StreamKind::Recv, true) {
  Eigen::setNbThreads(std::max(1, o.threads));
}

CpuDevice::~CpuDevice() {
  // Drain every worker stream before their buffers go away (a failure on one must not leave
  // another running).
  for (CpuStream* s : {&comm_, &copy_, &send_, &recv_}) {
    try {
      s->synchronize();
    } catch (...) {
    }
  }
}

std::string CpuDevice::name() const {
  return "cpu:" + std::to_string(options_.ordinal) + " (" + std::to_string(options_.threads) +
         (options_.threads == 1 ? " thread)" : " threads)");
}

Stream& CpuDevice::stream(StreamKind k) {
  switch (k) {
    case StreamKind::Compute:
      return compute_;
    case StreamKind::Comm:
      return comm_;
    case StreamKind::Copy:
      return copy_;
    case StreamKind::Send:
      return send_;
    case StreamKind::Recv:
      return recv_;
  }
  return compute_;
}

std::unique_ptr<Event> CpuDevice::create_event() { return std::make_unique<CpuEvent>(); }

void CpuDevice::synchronize() {
  for (CpuStream* s : {&comm_, &copy_, &send_, &recv_}) s->synchronize();
}

MemoryStats CpuDevice::memory_stats(MemorySpace space) const {
  const auto& c = counter(space);
  return {c.current.load(), c.peak.load(), space == MemorySpace::Device ? options_.capacity : 0};
}

void CpuDevice::reset_peak() {
  for (auto* c : {&device_mem_, &host_mem_}) c->peak.store(c->current.load());
}

void CpuDevice::do_copy(Stream& s, TensorRef dst, TensorRef src) {
  s.enqueue_host([dst, src] { copy_host_bytes(dst.data, src.data, src.bytes()); });
}

void CpuDevice::do_upload(TensorRef dst, const void* host, std::size_t bytes) {
  copy_host_bytes(dst.data, host, bytes);
}

void CpuDevice::do_download(void* host, TensorRef src, std::size_t bytes) {
  copy_host_bytes(host, src.data, bytes);
}

void* CpuDevice::raw_allocate(std::size_t bytes, MemorySpace space) {
  if (bytes == 0) return nullptr;
  void* p = cache(space).take(bytes);
  if (!p)
    throw RuntimeFailure("cpu device: out of memory allocating " + std::to_string(bytes) +
                         " bytes");
  counter(space).add(bytes);
  return p;
}

void CpuDevice::raw_free(void* data, std::size_t bytes, MemorySpace space) noexcept {
  cache(space).give(data, bytes);
  counter(space).sub(bytes);
}

void CpuDevice::do_fill(Stream& s, TensorRef x, float value) {
  if (x.type == ElemType::F32) {
    s.enqueue_host([=] { std::fill(x.f32(), x.f32() + x.numel, value); });
    return;
  }
  const std::uint16_t bits = float_to_half_bits(value, x.type);
  s.enqueue_host([=] {
    auto* h = static_cast<std::uint16_t*>(x.data);
    std::fill(h, h + x.numel, bits);
  });
}

void CpuDevice::do_scale(Stream& s, TensorRef x, float alpha) {
  s.enqueue_host([=] {
    Fp32Out y(x, x.numel, Start::Current);
    for (std::int64_t i = 0; i < x.numel; ++i) y.get()[i] *= alpha;
    y.commit();
  });
}

void CpuDevice::do_axpy(Stream& s, float alpha, TensorRef x, TensorRef y) {
  s.enqueue_host([=] {
    Fp32In xf(x, x.numel);
    Fp32Out yf(y, x.numel, Start::Current);
    for (std::int64_t i = 0; i < x.numel; ++i) yf.get()[i] += alpha * xf.get()[i];
    yf.commit();
  });
}

void CpuDevice::do_cast(Stream& s, TensorRef src, TensorRef dst) {
  if (src.type == dst.type) {
    copy(s, dst, src);
    return;
  }
  s.enqueue_host([=] {
    const auto n = static_cast<std::size_t>(src.numel);
    if (src.type == ElemType::F32) {
      store_f32(src.f32(), dst.data, dst.type, n);
    } else if (dst.type == ElemType::F32) {
      load_f32(src.data, src.type, dst.f32(), n);
    } else {  // bf16 <-> fp16 goes through fp32, which holds both exactly
      Fp32In wide(src, src.numel);
      store_f32(wide.get(), dst.data, dst.type, n);
    }
  });
}

void CpuDevice::do_sum(Stream& s, TensorRef x, TensorRef out) {
  s.enqueue_host([=] {
    Fp32In xf(x, x.numel);
    double acc = 0;  // double: the loss sum must not depend on accumulation order much
    for (std::int64_t i = 0; i < x.numel; ++i) acc += xf.get()[i];
    out.f32()[0] = static_cast<float>(acc);
  });
}

void CpuDevice::do_gemm(Stream& s, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n,
                        std::int64_t k, float alpha, TensorRef a, TensorRef b, float beta,
                        TensorRef c) {
  s.enqueue_host([=] {
    Fp32In af(a, m * k), bf(b, k * n);
    // beta == 0 overwrites C (which may hold NaN), so its old values are not needed.
    Fp32Out cf(c, m * n, beta == 0.0f ? Start::Undefined : Start::Current);
    MapMat A(af.get(), ta == Transpose::No ? m : k, ta == Transpose::No ? k : m);
    MapMat B(bf.get(), tb == Transpose::No ? k : n, tb == Transpose::No ? n : k);
    MapMat C(cf.get(), m, n);
    if (beta == 0.0f)
      C.setZero();
    else if (beta != 1.0f)
      C *= beta;
    if (ta == Transpose::No && tb == Transpose::No)
      C.noalias() += alpha * A * B;
    else if (ta == Transpose::No)
      C.noalias() += alpha * A * B.transpose();
    else if (tb == Transpose::No)
      C.noalias() += alpha * A.transpose() * B;
    else
      C.noalias() += alpha * A.transpose() * B.transpose();
    cf.commit();
  });
}

void CpuDevice::do_add_bias(Stream& s, TensorRef y, TensorRef bias, std::int64_t rows,
                            std::int64_t cols) {
  s.enqueue_host([=] {
    Fp32In bf(bias, cols);
    Fp32Out yf(y, rows * cols, Start::Current);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < cols; ++j) yf.get()[r * cols + j] += bf.get()[j];
    yf.commit();
  });
}

void CpuDevice::do_bias_backward(Stream& s, TensorRef dy, TensorRef dbias, std::int64_t rows,
                                 std::int64_t cols) {
  s.enqueue_host([=] {
    Fp32In dyf(dy, rows * cols);
    Fp32Out db(dbias, cols, Start::Current);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < cols; ++j) db.get()[j] += dyf.get()[r * cols + j];
    db.commit();
  });
}

}  // namespace cephalo::backend::cpu_detail
