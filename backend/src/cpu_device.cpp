// CPU device: Eigen GEMMs and straightforward fp32 loops for the transformer kernels. The
// kernels are written for clarity and exact fp32 semantics (they are the reference the CUDA
// device is tested against), not for peak CPU speed; GEMMs, which dominate, use Eigen.
//
// Mixed precision (device.hpp's element-type contract): every kernel body is the fp32 kernel.
// A bf16/fp16 input is widened into an fp32 copy, a bf16/fp16 output is computed into fp32
// scratch and rounded into the tensor once at the end (accumulated outputs start from their
// current values, so the += is in fp32). F32 tensors are used in place, so the all-fp32 path
// runs exactly the reference kernels with no copies. Conversions run inside the enqueued work,
// so they are ordered on the stream like the kernel itself.
#include "cephalo/backend/cpu_device.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <initializer_list>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "cephalo/backend/half.hpp"
#include "cephalo/core/error.hpp"

namespace cephalo::backend {
namespace {

using Clock = std::chrono::steady_clock;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using StridedMap = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

void require_numel(const TensorRef& t, std::int64_t n, const char* what) {
  if (t.numel < n)
    throw RuntimeFailure(std::string("cpu device: ") + what + " tensor has " +
                         std::to_string(t.numel) + " elements, needs " + std::to_string(n));
}

bool floating(ElemType t) { return t != ElemType::I32; }
// All of `ts` are the compute type `t`, which must be floating.
bool all_are(ElemType t, std::initializer_list<ElemType> ts) {
  return floating(t) && std::all_of(ts.begin(), ts.end(), [t](ElemType u) { return u == t; });
}
// A parameter-gradient output: the compute type or F32.
bool grad_of(ElemType g, ElemType t) { return g == t || g == ElemType::F32; }

// Throws "cpu device: <kernel> does not take A=bf16, B=f16, C=f32 (<rule>)" unless `ok`.
void expect_types(bool ok, const char* kernel,
                  std::initializer_list<std::pair<const char*, ElemType>> args, const char* rule) {
  if (ok) return;
  std::string got;
  for (const auto& [name, type] : args)
    got += (got.empty() ? "" : ", ") + std::string(name) + "=" + to_string(type);
  throw RuntimeFailure(std::string("cpu device: ") + kernel + " does not take " + got + " (" +
                       rule + ")");
}

// fp32 view of the first n elements of an input tensor: the tensor's own memory when it is F32
// (zero-copy), otherwise a widened copy (exact).
class Fp32In {
 public:
  Fp32In(const TensorRef& t, std::int64_t n) {
    if (t.type == ElemType::F32) {
      p_ = t.f32();
      return;
    }
    copy_.resize(static_cast<std::size_t>(n));
    load_f32(t.data, t.type, copy_.data(), copy_.size());
    p_ = copy_.data();
  }
  float* get() const { return p_; }

 private:
  std::vector<float> copy_;
  float* p_ = nullptr;
};

// What an fp32 output target holds before the kernel runs: nothing useful (overwritten
// outputs), or the tensor's current values (accumulated gradients, in-place updates).
enum class Start { Undefined, Current };

// fp32 target for the first n elements of an output tensor: the tensor itself when it is F32,
// otherwise scratch that commit() rounds into the tensor (once per element per call).
class Fp32Out {
 public:
  Fp32Out(const TensorRef& t, std::int64_t n, Start start) : t_(t) {
    if (t.type == ElemType::F32) {
      p_ = t.f32();
      return;
    }
    scratch_.resize(static_cast<std::size_t>(n));
    if (start == Start::Current) load_f32(t.data, t.type, scratch_.data(), scratch_.size());
    p_ = scratch_.data();
  }
  float* get() const { return p_; }
  void commit() const {
    if (t_.type != ElemType::F32) store_f32(scratch_.data(), t_.data, t_.type, scratch_.size());
  }

 private:
  TensorRef t_;
  std::vector<float> scratch_;
  float* p_ = nullptr;
};

// Shared state of one recorded event.
struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = true;  // an event never recorded counts as complete (CUDA semantics)
  Clock::time_point when{};
  std::exception_ptr error;
};

class CpuStream final : public Stream {
 public:
  CpuStream(StreamKind kind, bool threaded) : kind_(kind), threaded_(threaded) {
    if (threaded_) worker_ = std::thread([this] { run(); });
  }
  ~CpuStream() override {
    if (threaded_) {
      {
        std::lock_guard lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      worker_.join();
    }
  }
  StreamKind kind() const override { return kind_; }

  void enqueue_host(std::function<void()> fn) override {
    if (!threaded_) {
      fn();  // the compute stream is the calling thread: in order by construction
      return;
    }
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(fn));
      ++submitted_;
    }
    cv_.notify_all();
  }

  void synchronize() override {
    if (!threaded_) return;
    std::unique_lock lock(mu_);
    std::uint64_t target = submitted_;
    done_cv_.wait(lock, [&] { return completed_ >= target; });
    if (error_) {
      auto e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

  void wait(Event& event) override;

  // Failure of earlier queued work, if any (checked by events recorded behind it).
  std::exception_ptr error() {
    std::lock_guard lock(mu_);
    return error_;
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr failure;
      // After a failure the stream is poisoned: later work is skipped (it would read garbage)
      // but still counted so that synchronize() returns and reports the first error.
      bool poisoned;
      {
        std::lock_guard lock(mu_);
        poisoned = error_ != nullptr;
      }
      if (!poisoned) {
        try {
          fn();
        } catch (...) {
          failure = std::current_exception();
        }
      }
      {
        std::lock_guard lock(mu_);
        if (failure && !error_) error_ = failure;
        ++completed_;
      }
      done_cv_.notify_all();
    }
  }

  StreamKind kind_;
  bool threaded_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t submitted_ = 0, completed_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

class CpuEvent final : public Event {
 public:
  void record(Stream& stream) override {
    auto state = std::make_shared<EventState>();
    state->done = false;
    state_ = state;
    stream.enqueue_host([state] {
      std::lock_guard lock(state->mu);
      state->when = Clock::now();
      state->done = true;
      state->cv.notify_all();
    });
    stream_ = static_cast<CpuStream*>(&stream);
  }
  bool query() override {
    std::lock_guard lock(state_->mu);
    return state_->done;
  }
  void synchronize() override {
    {
      std::unique_lock lock(state_->mu);
      state_->cv.wait(lock, [&] { return state_->done; });
    }
    if (stream_)
      if (auto e = stream_->error()) std::rethrow_exception(e);
  }
  double seconds_since(Event& start) override {
    auto& s = static_cast<CpuEvent&>(start);
    synchronize();
    s.synchronize();
    return std::chrono::duration<double>(state_->when - s.state_->when).count();
  }
  std::shared_ptr<EventState> state() const { return state_; }

 private:
  std::shared_ptr<EventState> state_ = std::make_shared<EventState>();
  CpuStream* stream_ = nullptr;
};

void CpuStream::wait(Event& event) {
  auto state = static_cast<CpuEvent&>(event).state();
  auto block = [state] {
    std::unique_lock lock(state->mu);
    state->cv.wait(lock, [&] { return state->done; });
  };
  if (!threaded_)
    block();
  else
    enqueue_host(block);
}

struct SpaceCounter {
  std::atomic<std::size_t> current{0};
  std::atomic<std::size_t> peak{0};
  void add(std::size_t b) {
    std::size_t now = current.fetch_add(b) + b;
    std::size_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }
  void sub(std::size_t b) { current.fetch_sub(b); }
};

// Freed blocks kept for reuse, by exact (rounded) size. Returning every buffer to the C heap
// made each step's gathered units, activations and temporaries fresh mmap'd pages (glibc maps
// blocks above 128 KiB), so every first write page-faulted: collectives on new buffers ran
// several times slower than the profile's warm ones, and compute paid too. The executor's
// sizes repeat from step to step, so an exact-size cache (what a GPU caching allocator does)
// turns them into reuse. Bounded: beyond `limit` cached bytes a freed block goes back to the
// heap. Accounting is unaffected (it counts what is allocated, not what is cached).
class BlockCache {
 public:
  explicit BlockCache(std::size_t limit) : limit_(limit) {}
  ~BlockCache() {
    for (auto& [bytes, p] : free_) std::free(p);
  }
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  static std::size_t rounded(std::size_t bytes) { return (bytes + 4095) / 4096 * 4096; }

  void* take(std::size_t bytes) {
    const std::size_t r = rounded(bytes);
    {
      std::lock_guard lock(mu_);
      auto it = free_.find(r);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_ -= r;
        return p;
      }
    }
    // 64-byte alignment for vectorised Eigen kernels (4 KiB: page-aligned blocks).
    return std::aligned_alloc(4096, r);
  }
  void give(void* p, std::size_t bytes) noexcept {
    const std::size_t r = rounded(bytes);
    {
      std::lock_guard lock(mu_);
      if (cached_ + r <= limit_) {
        try {
          free_.emplace(r, p);
          cached_ += r;
          return;
        } catch (...) {  // no memory for the map node: release the block instead
        }
      }
    }
    std::free(p);
  }

 private:
  std::mutex mu_;
  std::multimap<std::size_t, void*> free_;
  std::size_t cached_ = 0;
  std::size_t limit_;
};

inline float gelu(float x) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}
inline float gelu_grad(float x) {
  constexpr float k = 0.7978845608028654f;
  float u = k * (x + 0.044715f * x * x * x);
  float t = std::tanh(u);
  float du = k * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& o)
      : options_(o),
        compute_(StreamKind::Compute, false),
        comm_(StreamKind::Comm, true),
        copy_(StreamKind::Copy, true) {
    Eigen::setNbThreads(std::max(1, o.threads));
  }
  ~CpuDevice() override {
    // Drain the worker streams before their buffers go away.
    try {
      comm_.synchronize();
      copy_.synchronize();
    } catch (...) {
    }
  }

  std::string kind() const override { return "cpu"; }
  std::string name() const override {
    return "cpu:" + std::to_string(options_.ordinal) + " (" + std::to_string(options_.threads) +
           (options_.threads == 1 ? " thread)" : " threads)");
  }
  // Every floating compute type; I32 (token ids) is not a compute type.
  bool supports(ElemType t) const override { return floating(t); }

  Stream& stream(StreamKind k) override {
    switch (k) {
      case StreamKind::Compute:
        return compute_;
      case StreamKind::Comm:
        return comm_;
      case StreamKind::Copy:
        return copy_;
    }
    return compute_;
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }
  void synchronize() override {
    comm_.synchronize();
    copy_.synchronize();
  }

  MemoryStats memory_stats(MemorySpace space) const override {
    const auto& c = counter(space);
    return {c.current.load(), c.peak.load(), space == MemorySpace::Device ? options_.capacity : 0};
  }
  void reset_peak() override {
    for (auto* c : {&device_mem_, &host_mem_}) c->peak.store(c->current.load());
  }

  void copy(Stream& s, TensorRef dst, TensorRef src) override {
    if (dst.bytes() < src.bytes())
      throw RuntimeFailure("cpu device: copy of " + std::to_string(src.bytes()) + " bytes into " +
                           std::to_string(dst.bytes()));
    s.enqueue_host([dst, src] { std::memcpy(dst.data, src.data, src.bytes()); });
  }
  void upload(TensorRef dst, const void* host, std::size_t bytes) override {
    if (dst.bytes() < bytes) throw RuntimeFailure("cpu device: upload larger than destination");
    std::memcpy(dst.data, host, bytes);
  }
  void download(void* host, TensorRef src, std::size_t bytes) override {
    if (src.bytes() < bytes) throw RuntimeFailure("cpu device: download larger than source");
    std::memcpy(host, src.data, bytes);
  }

  void fill(Stream& s, TensorRef x, float value) override {
    expect_types(floating(x.type), "fill", {{"x", x.type}}, "x is a floating type");
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
  void scale(Stream& s, TensorRef x, float alpha) override {
    expect_types(floating(x.type), "scale", {{"x", x.type}}, "x is a floating type");
    s.enqueue_host([=] {
      Fp32Out y(x, x.numel, Start::Current);
      for (std::int64_t i = 0; i < x.numel; ++i) y.get()[i] *= alpha;
      y.commit();
    });
  }
  void axpy(Stream& s, float alpha, TensorRef x, TensorRef y) override {
    expect_types(floating(x.type) && floating(y.type), "axpy", {{"x", x.type}, {"y", y.type}},
                 "x and y are floating types");
    require_numel(y, x.numel, "axpy y");
    s.enqueue_host([=] {
      Fp32In xf(x, x.numel);
      Fp32Out yf(y, x.numel, Start::Current);
      for (std::int64_t i = 0; i < x.numel; ++i) yf.get()[i] += alpha * xf.get()[i];
      yf.commit();
    });
  }
  void cast(Stream& s, TensorRef src, TensorRef dst) override {
    expect_types(floating(src.type) && floating(dst.type), "cast",
                 {{"src", src.type}, {"dst", dst.type}}, "src and dst are floating types");
    require_numel(dst, src.numel, "cast dst");
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
  void sum(Stream& s, TensorRef x, TensorRef out) override {
    expect_types(floating(x.type) && out.type == ElemType::F32, "sum",
                 {{"x", x.type}, {"out", out.type}}, "x is a floating type, out is f32");
    require_numel(out, 1, "sum out");
    s.enqueue_host([=] {
      Fp32In xf(x, x.numel);
      double acc = 0;  // double: the loss sum must not depend on accumulation order much
      for (std::int64_t i = 0; i < x.numel; ++i) acc += xf.get()[i];
      out.f32()[0] = static_cast<float>(acc);
    });
  }

  void gemm(Stream& s, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
            float alpha, TensorRef a, TensorRef b, float beta, TensorRef c) override {
    expect_types(all_are(a.type, {b.type}) && grad_of(c.type, a.type), "gemm",
                 {{"A", a.type}, {"B", b.type}, {"C", c.type}},
                 "A and B share the compute type T; C is T or f32");
    require_numel(a, m * k, "gemm A");
    require_numel(b, k * n, "gemm B");
    require_numel(c, m * n, "gemm C");
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
  void add_bias(Stream& s, TensorRef y, TensorRef bias, std::int64_t rows,
                std::int64_t cols) override {
    expect_types(all_are(y.type, {bias.type}), "add_bias", {{"y", y.type}, {"bias", bias.type}},
                 "y and bias share the compute type");
    require_numel(y, rows * cols, "add_bias y");
    require_numel(bias, cols, "add_bias bias");
    s.enqueue_host([=] {
      Fp32In bf(bias, cols);
      Fp32Out yf(y, rows * cols, Start::Current);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < cols; ++j) yf.get()[r * cols + j] += bf.get()[j];
      yf.commit();
    });
  }
  void bias_backward(Stream& s, TensorRef dy, TensorRef dbias, std::int64_t rows,
                     std::int64_t cols) override {
    expect_types(floating(dy.type) && grad_of(dbias.type, dy.type), "bias_backward",
                 {{"dy", dy.type}, {"dbias", dbias.type}},
                 "dy is the compute type T; dbias is T or f32");
    require_numel(dy, rows * cols, "bias_backward dy");
    require_numel(dbias, cols, "bias_backward dbias");
    s.enqueue_host([=] {
      Fp32In dyf(dy, rows * cols);
      Fp32Out db(dbias, cols, Start::Current);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < cols; ++j) db.get()[j] += dyf.get()[r * cols + j];
      db.commit();
    });
  }

  void layer_norm_forward(Stream& s, TensorRef x, TensorRef gamma, TensorRef beta, TensorRef y,
                          TensorRef mean, TensorRef rstd, std::int64_t rows, std::int64_t cols,
                          float eps) override {
    expect_types(all_are(x.type, {gamma.type, beta.type, y.type}) && mean.type == ElemType::F32 &&
                     rstd.type == ElemType::F32,
                 "layer_norm_forward",
                 {{"x", x.type},
                  {"gamma", gamma.type},
                  {"beta", beta.type},
                  {"y", y.type},
                  {"mean", mean.type},
                  {"rstd", rstd.type}},
                 "x, gamma, beta, y share the compute type; mean, rstd are f32");
    require_numel(x, rows * cols, "layer_norm x");
    require_numel(gamma, cols, "layer_norm gamma");
    require_numel(beta, cols, "layer_norm beta");
    require_numel(y, rows * cols, "layer_norm y");
    require_numel(mean, rows, "layer_norm mean");
    require_numel(rstd, rows, "layer_norm rstd");
    s.enqueue_host([=] {
      Fp32In xf(x, rows * cols), gf(gamma, cols), bf(beta, cols);
      Fp32Out yf(y, rows * cols, Start::Undefined);
      const float* g = gf.get();
      const float* be = bf.get();
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = xf.get() + r * cols;
        float* yr = yf.get() + r * cols;
        double mu = 0;
        for (std::int64_t j = 0; j < cols; ++j) mu += xr[j];
        mu /= static_cast<double>(cols);
        double var = 0;
        for (std::int64_t j = 0; j < cols; ++j) var += (xr[j] - mu) * (xr[j] - mu);
        var /= static_cast<double>(cols);
        float rs = static_cast<float>(1.0 / std::sqrt(var + eps));
        float m = static_cast<float>(mu);
        for (std::int64_t j = 0; j < cols; ++j) yr[j] = (xr[j] - m) * rs * g[j] + be[j];
        mean.f32()[r] = m;
        rstd.f32()[r] = rs;
      }
      yf.commit();
    });
  }
  void layer_norm_backward(Stream& s, TensorRef x, TensorRef gamma, TensorRef mean, TensorRef rstd,
                           TensorRef dy, TensorRef dx, TensorRef dgamma, TensorRef dbeta,
                           std::int64_t rows, std::int64_t cols) override {
    expect_types(all_are(x.type, {gamma.type, dy.type, dx.type}) && mean.type == ElemType::F32 &&
                     rstd.type == ElemType::F32 && grad_of(dgamma.type, x.type) &&
                     grad_of(dbeta.type, x.type),
                 "layer_norm_backward",
                 {{"x", x.type},
                  {"gamma", gamma.type},
                  {"mean", mean.type},
                  {"rstd", rstd.type},
                  {"dy", dy.type},
                  {"dx", dx.type},
                  {"dgamma", dgamma.type},
                  {"dbeta", dbeta.type}},
                 "x, gamma, dy, dx share the compute type T; mean, rstd are f32; dgamma, dbeta "
                 "are T or f32");
    require_numel(x, rows * cols, "layer_norm_backward x");
    require_numel(gamma, cols, "layer_norm_backward gamma");
    require_numel(mean, rows, "layer_norm_backward mean");
    require_numel(rstd, rows, "layer_norm_backward rstd");
    require_numel(dy, rows * cols, "layer_norm_backward dy");
    require_numel(dx, rows * cols, "layer_norm_backward dx");
    require_numel(dgamma, cols, "layer_norm_backward dgamma");
    require_numel(dbeta, cols, "layer_norm_backward dbeta");
    s.enqueue_host([=] {
      Fp32In xf(x, rows * cols), gf(gamma, cols), dyf(dy, rows * cols);
      Fp32Out dxf(dx, rows * cols, Start::Undefined);
      Fp32Out dg(dgamma, cols, Start::Current), db(dbeta, cols, Start::Current);
      const float* gm = gf.get();
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = xf.get() + r * cols;
        const float* dyr = dyf.get() + r * cols;
        float* dxr = dxf.get() + r * cols;
        float m = mean.f32()[r], rs = rstd.f32()[r];
        double sum_g = 0, sum_gx = 0;
        for (std::int64_t j = 0; j < cols; ++j) {
          float xhat = (xr[j] - m) * rs;
          float g = dyr[j] * gm[j];
          sum_g += g;
          sum_gx += g * xhat;
          dg.get()[j] += dyr[j] * xhat;
          db.get()[j] += dyr[j];
        }
        float mg = static_cast<float>(sum_g / static_cast<double>(cols));
        float mgx = static_cast<float>(sum_gx / static_cast<double>(cols));
        for (std::int64_t j = 0; j < cols; ++j) {
          float xhat = (xr[j] - m) * rs;
          float g = dyr[j] * gm[j];
          dxr[j] = rs * (g - mg - xhat * mgx);
        }
      }
      dxf.commit();
      dg.commit();
      db.commit();
    });
  }
  void gelu_forward(Stream& s, TensorRef x, TensorRef y) override {
    expect_types(all_are(x.type, {y.type}), "gelu_forward", {{"x", x.type}, {"y", y.type}},
                 "x and y share the compute type");
    require_numel(y, x.numel, "gelu y");
    s.enqueue_host([=] {
      Fp32In xf(x, x.numel);
      Fp32Out yf(y, x.numel, Start::Undefined);
      for (std::int64_t i = 0; i < x.numel; ++i) yf.get()[i] = gelu(xf.get()[i]);
      yf.commit();
    });
  }
  void gelu_backward(Stream& s, TensorRef x, TensorRef dy, TensorRef dx) override {
    expect_types(all_are(x.type, {dy.type, dx.type}), "gelu_backward",
                 {{"x", x.type}, {"dy", dy.type}, {"dx", dx.type}},
                 "x, dy, dx share the compute type");
    require_numel(dy, x.numel, "gelu_backward dy");
    require_numel(dx, x.numel, "gelu_backward dx");
    s.enqueue_host([=] {
      Fp32In xf(x, x.numel), dyf(dy, x.numel);
      Fp32Out dxf(dx, x.numel, Start::Undefined);
      for (std::int64_t i = 0; i < x.numel; ++i)
        dxf.get()[i] = dyf.get()[i] * gelu_grad(xf.get()[i]);
      dxf.commit();
    });
  }

  void attention_forward(Stream& s, const AttentionShape& sh, TensorRef qkv, TensorRef out,
                         TensorRef lse) override {
    expect_types(all_are(qkv.type, {out.type}) && lse.type == ElemType::F32, "attention_forward",
                 {{"qkv", qkv.type}, {"out", out.type}, {"lse", lse.type}},
                 "qkv and out share the compute type; lse is f32");
    const std::int64_t C = sh.heads * sh.head_dim, T = sh.seq, D = sh.head_dim;
    require_numel(qkv, sh.batch * T * 3 * C, "attention qkv");
    require_numel(out, sh.batch * T * C, "attention out");
    require_numel(lse, sh.batch * sh.heads * T, "attention lse");
    s.enqueue_host([=] {
      Fp32In qkvf(qkv, sh.batch * T * 3 * C);
      Fp32Out outf(out, sh.batch * T * C, Start::Undefined);
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      RowMat S(T, T);
      for (std::int64_t b = 0; b < sh.batch; ++b)
        for (std::int64_t h = 0; h < sh.heads; ++h) {
          float* base = qkvf.get() + b * T * 3 * C + h * D;
          StridedMap Q(base, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap K(base + C, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap V(base + 2 * C, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap O(outf.get() + b * T * C + h * D, T, D, Eigen::OuterStride<>(C));
          S.noalias() = scale * Q * K.transpose();
          float* l = lse.f32() + (b * sh.heads + h) * T;
          for (std::int64_t i = 0; i < T; ++i) {
            float mx = S(i, 0);
            for (std::int64_t j = 1; j <= i; ++j) mx = std::max(mx, S(i, j));
            double z = 0;
            for (std::int64_t j = 0; j <= i; ++j) {
              S(i, j) = std::exp(S(i, j) - mx);
              z += S(i, j);
            }
            for (std::int64_t j = 0; j <= i; ++j) S(i, j) = static_cast<float>(S(i, j) / z);
            for (std::int64_t j = i + 1; j < T; ++j) S(i, j) = 0.0f;
            l[i] = mx + static_cast<float>(std::log(z));
          }
          O.noalias() = S * V;
        }
      outf.commit();
    });
  }
  void attention_backward(Stream& s, const AttentionShape& sh, TensorRef qkv, TensorRef out,
                          TensorRef lse, TensorRef dout, TensorRef dqkv) override {
    expect_types(all_are(qkv.type, {out.type, dout.type, dqkv.type}) && lse.type == ElemType::F32,
                 "attention_backward",
                 {{"qkv", qkv.type},
                  {"out", out.type},
                  {"lse", lse.type},
                  {"dout", dout.type},
                  {"dqkv", dqkv.type}},
                 "qkv, out, dout, dqkv share the compute type; lse is f32");
    const std::int64_t C = sh.heads * sh.head_dim, T = sh.seq, D = sh.head_dim;
    require_numel(qkv, sh.batch * T * 3 * C, "attention_backward qkv");
    require_numel(out, sh.batch * T * C, "attention_backward out");
    require_numel(lse, sh.batch * sh.heads * T, "attention_backward lse");
    require_numel(dout, sh.batch * T * C, "attention_backward dout");
    require_numel(dqkv, sh.batch * T * 3 * C, "attention_backward dqkv");
    s.enqueue_host([=] {
      Fp32In qkvf(qkv, sh.batch * T * 3 * C), outf(out, sh.batch * T * C),
          doutf(dout, sh.batch * T * C);
      Fp32Out dqkvf(dqkv, sh.batch * T * 3 * C, Start::Undefined);
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      RowMat P(T, T), dP(T, T);
      for (std::int64_t b = 0; b < sh.batch; ++b)
        for (std::int64_t h = 0; h < sh.heads; ++h) {
          float* base = qkvf.get() + b * T * 3 * C + h * D;
          float* dbase = dqkvf.get() + b * T * 3 * C + h * D;
          StridedMap Q(base, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap K(base + C, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap V(base + 2 * C, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap dQ(dbase, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap dK(dbase + C, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap dV(dbase + 2 * C, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap O(outf.get() + b * T * C + h * D, T, D, Eigen::OuterStride<>(C));
          StridedMap dO(doutf.get() + b * T * C + h * D, T, D, Eigen::OuterStride<>(C));
          const float* l = lse.f32() + (b * sh.heads + h) * T;
          P.noalias() = scale * Q * K.transpose();
          for (std::int64_t i = 0; i < T; ++i)
            for (std::int64_t j = 0; j < T; ++j) P(i, j) = j <= i ? std::exp(P(i, j) - l[i]) : 0;
          dV.noalias() = P.transpose() * dO;
          dP.noalias() = dO * V.transpose();
          for (std::int64_t i = 0; i < T; ++i) {
            float delta = O.row(i).dot(dO.row(i));
            for (std::int64_t j = 0; j < T; ++j) dP(i, j) = P(i, j) * (dP(i, j) - delta) * scale;
          }
          dQ.noalias() = dP * K;
          dK.noalias() = dP.transpose() * Q;
        }
      dqkvf.commit();
    });
  }

  void embedding_forward(Stream& s, TensorRef tokens, TensorRef wte, TensorRef wpe, TensorRef out,
                         std::int64_t rows, std::int64_t seq, std::int64_t hidden) override {
    expect_types(tokens.type == ElemType::I32 && all_are(wte.type, {wpe.type, out.type}),
                 "embedding_forward",
                 {{"tokens", tokens.type}, {"wte", wte.type}, {"wpe", wpe.type}, {"out", out.type}},
                 "tokens are i32; wte, wpe, out share the compute type");
    require_numel(tokens, rows, "embedding tokens");
    require_numel(wpe, std::min(rows, seq) * hidden, "embedding wpe");
    require_numel(out, rows * hidden, "embedding out");
    const std::int64_t vocab = wte.numel / hidden;
    s.enqueue_host([=] {
      Fp32In wtef(wte, vocab * hidden), wpef(wpe, std::min(rows, seq) * hidden);
      Fp32Out outf(out, rows * hidden, Start::Undefined);
      for (std::int64_t n = 0; n < rows; ++n) {
        std::int32_t t = tokens.i32()[n];
        if (t < 0 || t >= vocab)
          throw RuntimeFailure("embedding: token id " + std::to_string(t) +
                               " outside the vocabulary of " + std::to_string(vocab));
        const float* e = wtef.get() + t * hidden;
        const float* p = wpef.get() + (n % seq) * hidden;
        float* o = outf.get() + n * hidden;
        for (std::int64_t j = 0; j < hidden; ++j) o[j] = e[j] + p[j];
      }
      outf.commit();
    });
  }
  void embedding_backward(Stream& s, TensorRef tokens, TensorRef dout, TensorRef dwte,
                          TensorRef dwpe, std::int64_t rows, std::int64_t seq,
                          std::int64_t hidden) override {
    expect_types(
        tokens.type == ElemType::I32 && floating(dout.type) && grad_of(dwte.type, dout.type) &&
            grad_of(dwpe.type, dout.type),
        "embedding_backward",
        {{"tokens", tokens.type}, {"dout", dout.type}, {"dwte", dwte.type}, {"dwpe", dwpe.type}},
        "tokens are i32; dout is the compute type T; dwte, dwpe are T or f32");
    require_numel(tokens, rows, "embedding_backward tokens");
    require_numel(dout, rows * hidden, "embedding_backward dout");
    require_numel(dwpe, std::min(rows, seq) * hidden, "embedding_backward dwpe");
    const std::int64_t vocab = dwte.numel / hidden;
    s.enqueue_host([=] {
      Fp32In df(dout, rows * hidden);
      Fp32Out ef(dwte, vocab * hidden, Start::Current);
      Fp32Out pf(dwpe, std::min(rows, seq) * hidden, Start::Current);
      for (std::int64_t n = 0; n < rows; ++n) {
        std::int32_t t = tokens.i32()[n];
        if (t < 0 || t >= vocab)
          throw RuntimeFailure("embedding_backward: token id " + std::to_string(t) +
                               " outside the vocabulary of " + std::to_string(vocab));
        const float* d = df.get() + n * hidden;
        float* e = ef.get() + t * hidden;
        float* p = pf.get() + (n % seq) * hidden;
        for (std::int64_t j = 0; j < hidden; ++j) {
          e[j] += d[j];
          p[j] += d[j];
        }
      }
      ef.commit();
      pf.commit();
    });
  }
  void cross_entropy_forward(Stream& s, TensorRef logits, TensorRef targets, TensorRef losses,
                             TensorRef lse, std::int64_t rows, std::int64_t vocab) override {
    expect_types(floating(logits.type) && targets.type == ElemType::I32 &&
                     losses.type == ElemType::F32 && lse.type == ElemType::F32,
                 "cross_entropy_forward",
                 {{"logits", logits.type},
                  {"targets", targets.type},
                  {"losses", losses.type},
                  {"lse", lse.type}},
                 "logits are the compute type; targets are i32; losses, lse are f32");
    require_numel(logits, rows * vocab, "cross_entropy logits");
    require_numel(targets, rows, "cross_entropy targets");
    require_numel(losses, rows, "cross_entropy losses");
    require_numel(lse, rows, "cross_entropy lse");
    s.enqueue_host([=] {
      Fp32In lf(logits, rows * vocab);
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* x = lf.get() + r * vocab;
        float mx = *std::max_element(x, x + vocab);
        double z = 0;
        for (std::int64_t j = 0; j < vocab; ++j) z += std::exp(x[j] - mx);
        float l = mx + static_cast<float>(std::log(z));
        lse.f32()[r] = l;
        losses.f32()[r] = l - x[targets.i32()[r]];
      }
    });
  }
  void cross_entropy_backward(Stream& s, TensorRef logits, TensorRef targets, TensorRef lse,
                              TensorRef dlogits, std::int64_t rows, std::int64_t vocab,
                              float grad_scale) override {
    expect_types(all_are(logits.type, {dlogits.type}) && targets.type == ElemType::I32 &&
                     lse.type == ElemType::F32,
                 "cross_entropy_backward",
                 {{"logits", logits.type},
                  {"targets", targets.type},
                  {"lse", lse.type},
                  {"dlogits", dlogits.type}},
                 "logits and dlogits share the compute type; targets are i32; lse is f32");
    require_numel(logits, rows * vocab, "cross_entropy_backward logits");
    require_numel(targets, rows, "cross_entropy_backward targets");
    require_numel(lse, rows, "cross_entropy_backward lse");
    require_numel(dlogits, rows * vocab, "cross_entropy_backward dlogits");
    s.enqueue_host([=] {
      // Widened before dlogits is written: the two may alias. In F32 both are the same memory
      // and each element is read before it is overwritten.
      Fp32In lf(logits, rows * vocab);
      Fp32Out df(dlogits, rows * vocab, Start::Undefined);
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* x = lf.get() + r * vocab;
        float* d = df.get() + r * vocab;
        float l = lse.f32()[r];
        for (std::int64_t j = 0; j < vocab; ++j) d[j] = std::exp(x[j] - l) * grad_scale;
        d[targets.i32()[r]] -= grad_scale;
      }
      df.commit();
    });
  }
  void adamw_step(Stream& s, TensorRef param, TensorRef grad, TensorRef m, TensorRef v,
                  const AdamWParams& p) override {
    expect_types(all_are(ElemType::F32, {param.type, grad.type, m.type, v.type}), "adamw_step",
                 {{"param", param.type}, {"grad", grad.type}, {"m", m.type}, {"v", v.type}},
                 "master weights, gradient shard and moments are all f32");
    require_numel(grad, param.numel, "adamw grad");
    require_numel(m, param.numel, "adamw m");
    require_numel(v, param.numel, "adamw v");
    s.enqueue_host([=] {
      // PyTorch's AdamW: decay first, then the bias-corrected Adam update.
      const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
      const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
      const float step_size = static_cast<float>(p.lr / bc1);
      const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
      for (std::int64_t i = 0; i < param.numel; ++i) {
        float g = grad.f32()[i];
        float& w = param.f32()[i];
        float& mi = m.f32()[i];
        float& vi = v.f32()[i];
        w *= 1.0f - p.lr * p.weight_decay;
        mi = p.beta1 * mi + (1.0f - p.beta1) * g;
        vi = p.beta2 * vi + (1.0f - p.beta2) * g * g;
        w -= step_size * mi / (std::sqrt(vi) / bc2_sqrt + p.eps);
      }
    });
  }

 protected:
  void* raw_allocate(std::size_t bytes, MemorySpace space) override {
    if (bytes == 0) return nullptr;
    void* p = cache(space).take(bytes);
    if (!p)
      throw RuntimeFailure("cpu device: out of memory allocating " + std::to_string(bytes) +
                           " bytes");
    counter(space).add(bytes);
    return p;
  }
  void raw_free(void* data, std::size_t bytes, MemorySpace space) noexcept override {
    cache(space).give(data, bytes);
    counter(space).sub(bytes);
  }

 private:
  SpaceCounter& counter(MemorySpace s) {
    return s == MemorySpace::Device ? device_mem_ : host_mem_;
  }
  BlockCache& cache(MemorySpace s) {
    return s == MemorySpace::Device ? device_cache_ : host_cache_;
  }
  const SpaceCounter& counter(MemorySpace s) const {
    return s == MemorySpace::Device ? device_mem_ : host_mem_;
  }

  CpuDeviceOptions options_;
  CpuStream compute_, comm_, copy_;
  SpaceCounter device_mem_, host_mem_;
  BlockCache device_cache_{options_.cache_bytes}, host_cache_{options_.cache_bytes};
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(const CpuDeviceOptions& options) {
  return std::make_unique<CpuDevice>(options);
}

}  // namespace cephalo::backend
