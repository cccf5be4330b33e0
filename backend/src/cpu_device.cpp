// CPU device: Eigen GEMMs and straightforward fp32 loops for the transformer kernels. The
// kernels are written for clarity and exact fp32 semantics (they are the reference the CUDA
// device is tested against), not for peak CPU speed; GEMMs, which dominate, use Eigen.
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
#include <mutex>
#include <new>
#include <thread>

#include "cephalo/core/error.hpp"

namespace cephalo::backend {
namespace {

using Clock = std::chrono::steady_clock;
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using StridedMap = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

void require_f32(const TensorRef& t, const char* what) {
  if (t.type != ElemType::F32)
    throw RuntimeFailure(std::string("cpu device: ") + what + " needs f32 tensors, got " +
                         to_string(t.type) + " (the CPU backend computes in fp32 only)");
}
void require_numel(const TensorRef& t, std::int64_t n, const char* what) {
  if (t.numel < n)
    throw RuntimeFailure(std::string("cpu device: ") + what + " tensor has " +
                         std::to_string(t.numel) + " elements, needs " + std::to_string(n));
}

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
  bool supports(ElemType t) const override { return t == ElemType::F32 || t == ElemType::I32; }

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
    require_f32(x, "fill");
    s.enqueue_host([=] { std::fill(x.f32(), x.f32() + x.numel, value); });
  }
  void scale(Stream& s, TensorRef x, float alpha) override {
    require_f32(x, "scale");
    s.enqueue_host([=] {
      for (std::int64_t i = 0; i < x.numel; ++i) x.f32()[i] *= alpha;
    });
  }
  void axpy(Stream& s, float alpha, TensorRef x, TensorRef y) override {
    require_f32(x, "axpy");
    require_f32(y, "axpy");
    require_numel(y, x.numel, "axpy y");
    s.enqueue_host([=] {
      for (std::int64_t i = 0; i < x.numel; ++i) y.f32()[i] += alpha * x.f32()[i];
    });
  }
  void cast(Stream& s, TensorRef src, TensorRef dst) override {
    if (src.type != dst.type || src.type != ElemType::F32)
      throw RuntimeFailure(std::string("cpu device: cast ") + to_string(src.type) + " -> " +
                           to_string(dst.type) + " unsupported (fp32 only on CPU)");
    copy(s, dst, src);
  }
  void sum(Stream& s, TensorRef x, TensorRef out) override {
    require_f32(x, "sum");
    require_numel(out, 1, "sum out");
    s.enqueue_host([=] {
      double acc = 0;  // double: the loss sum must not depend on accumulation order much
      for (std::int64_t i = 0; i < x.numel; ++i) acc += x.f32()[i];
      out.f32()[0] = static_cast<float>(acc);
    });
  }

  void gemm(Stream& s, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
            float alpha, TensorRef a, TensorRef b, float beta, TensorRef c) override {
    require_f32(a, "gemm A");
    require_f32(b, "gemm B");
    require_f32(c, "gemm C");
    require_numel(a, m * k, "gemm A");
    require_numel(b, k * n, "gemm B");
    require_numel(c, m * n, "gemm C");
    s.enqueue_host([=] {
      MapMat A(a.f32(), ta == Transpose::No ? m : k, ta == Transpose::No ? k : m);
      MapMat B(b.f32(), tb == Transpose::No ? k : n, tb == Transpose::No ? n : k);
      MapMat C(c.f32(), m, n);
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
    });
  }
  void add_bias(Stream& s, TensorRef y, TensorRef bias, std::int64_t rows,
                std::int64_t cols) override {
    require_numel(y, rows * cols, "add_bias y");
    require_numel(bias, cols, "add_bias bias");
    s.enqueue_host([=] {
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < cols; ++j) y.f32()[r * cols + j] += bias.f32()[j];
    });
  }
  void bias_backward(Stream& s, TensorRef dy, TensorRef dbias, std::int64_t rows,
                     std::int64_t cols) override {
    require_numel(dy, rows * cols, "bias_backward dy");
    require_numel(dbias, cols, "bias_backward dbias");
    s.enqueue_host([=] {
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < cols; ++j) dbias.f32()[j] += dy.f32()[r * cols + j];
    });
  }

  void layer_norm_forward(Stream& s, TensorRef x, TensorRef gamma, TensorRef beta, TensorRef y,
                          TensorRef mean, TensorRef rstd, std::int64_t rows, std::int64_t cols,
                          float eps) override {
    require_numel(x, rows * cols, "layer_norm x");
    require_numel(y, rows * cols, "layer_norm y");
    require_numel(mean, rows, "layer_norm mean");
    require_numel(rstd, rows, "layer_norm rstd");
    s.enqueue_host([=] {
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = x.f32() + r * cols;
        float* yr = y.f32() + r * cols;
        double mu = 0;
        for (std::int64_t j = 0; j < cols; ++j) mu += xr[j];
        mu /= static_cast<double>(cols);
        double var = 0;
        for (std::int64_t j = 0; j < cols; ++j) var += (xr[j] - mu) * (xr[j] - mu);
        var /= static_cast<double>(cols);
        float rs = static_cast<float>(1.0 / std::sqrt(var + eps));
        float m = static_cast<float>(mu);
        for (std::int64_t j = 0; j < cols; ++j)
          yr[j] = (xr[j] - m) * rs * gamma.f32()[j] + beta.f32()[j];
        mean.f32()[r] = m;
        rstd.f32()[r] = rs;
      }
    });
  }
  void layer_norm_backward(Stream& s, TensorRef x, TensorRef gamma, TensorRef mean, TensorRef rstd,
                           TensorRef dy, TensorRef dx, TensorRef dgamma, TensorRef dbeta,
                           std::int64_t rows, std::int64_t cols) override {
    require_numel(dx, rows * cols, "layer_norm_backward dx");
    s.enqueue_host([=] {
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = x.f32() + r * cols;
        const float* dyr = dy.f32() + r * cols;
        float* dxr = dx.f32() + r * cols;
        float m = mean.f32()[r], rs = rstd.f32()[r];
        double sum_g = 0, sum_gx = 0;
        for (std::int64_t j = 0; j < cols; ++j) {
          float xhat = (xr[j] - m) * rs;
          float g = dyr[j] * gamma.f32()[j];
          sum_g += g;
          sum_gx += g * xhat;
          dgamma.f32()[j] += dyr[j] * xhat;
          dbeta.f32()[j] += dyr[j];
        }
        float mg = static_cast<float>(sum_g / static_cast<double>(cols));
        float mgx = static_cast<float>(sum_gx / static_cast<double>(cols));
        for (std::int64_t j = 0; j < cols; ++j) {
          float xhat = (xr[j] - m) * rs;
          float g = dyr[j] * gamma.f32()[j];
          dxr[j] = rs * (g - mg - xhat * mgx);
        }
      }
    });
  }
  void gelu_forward(Stream& s, TensorRef x, TensorRef y) override {
    require_numel(y, x.numel, "gelu y");
    s.enqueue_host([=] {
      for (std::int64_t i = 0; i < x.numel; ++i) y.f32()[i] = gelu(x.f32()[i]);
    });
  }
  void gelu_backward(Stream& s, TensorRef x, TensorRef dy, TensorRef dx) override {
    require_numel(dx, x.numel, "gelu_backward dx");
    s.enqueue_host([=] {
      for (std::int64_t i = 0; i < x.numel; ++i) dx.f32()[i] = dy.f32()[i] * gelu_grad(x.f32()[i]);
    });
  }

  void attention_forward(Stream& s, const AttentionShape& sh, TensorRef qkv, TensorRef out,
                         TensorRef lse) override {
    const std::int64_t C = sh.heads * sh.head_dim, T = sh.seq, D = sh.head_dim;
    require_numel(qkv, sh.batch * T * 3 * C, "attention qkv");
    require_numel(out, sh.batch * T * C, "attention out");
    require_numel(lse, sh.batch * sh.heads * T, "attention lse");
    s.enqueue_host([=] {
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      RowMat S(T, T);
      for (std::int64_t b = 0; b < sh.batch; ++b)
        for (std::int64_t h = 0; h < sh.heads; ++h) {
          float* base = qkv.f32() + b * T * 3 * C + h * D;
          StridedMap Q(base, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap K(base + C, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap V(base + 2 * C, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap O(out.f32() + b * T * C + h * D, T, D, Eigen::OuterStride<>(C));
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
    });
  }
  void attention_backward(Stream& s, const AttentionShape& sh, TensorRef qkv, TensorRef out,
                          TensorRef lse, TensorRef dout, TensorRef dqkv) override {
    const std::int64_t C = sh.heads * sh.head_dim, T = sh.seq, D = sh.head_dim;
    require_numel(dqkv, sh.batch * T * 3 * C, "attention_backward dqkv");
    s.enqueue_host([=] {
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      RowMat P(T, T), dP(T, T);
      for (std::int64_t b = 0; b < sh.batch; ++b)
        for (std::int64_t h = 0; h < sh.heads; ++h) {
          float* base = qkv.f32() + b * T * 3 * C + h * D;
          float* dbase = dqkv.f32() + b * T * 3 * C + h * D;
          StridedMap Q(base, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap K(base + C, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap V(base + 2 * C, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap dQ(dbase, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap dK(dbase + C, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap dV(dbase + 2 * C, T, D, Eigen::OuterStride<>(3 * C));
          StridedMap O(out.f32() + b * T * C + h * D, T, D, Eigen::OuterStride<>(C));
          StridedMap dO(dout.f32() + b * T * C + h * D, T, D, Eigen::OuterStride<>(C));
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
    });
  }

  void embedding_forward(Stream& s, TensorRef tokens, TensorRef wte, TensorRef wpe, TensorRef out,
                         std::int64_t rows, std::int64_t seq, std::int64_t hidden) override {
    require_numel(out, rows * hidden, "embedding out");
    const std::int64_t vocab = wte.numel / hidden;
    s.enqueue_host([=] {
      for (std::int64_t n = 0; n < rows; ++n) {
        std::int32_t t = tokens.i32()[n];
        if (t < 0 || t >= vocab)
          throw RuntimeFailure("embedding: token id " + std::to_string(t) +
                               " outside the vocabulary of " + std::to_string(vocab));
        const float* e = wte.f32() + t * hidden;
        const float* p = wpe.f32() + (n % seq) * hidden;
        float* o = out.f32() + n * hidden;
        for (std::int64_t j = 0; j < hidden; ++j) o[j] = e[j] + p[j];
      }
    });
  }
  void embedding_backward(Stream& s, TensorRef tokens, TensorRef dout, TensorRef dwte,
                          TensorRef dwpe, std::int64_t rows, std::int64_t seq,
                          std::int64_t hidden) override {
    s.enqueue_host([=] {
      for (std::int64_t n = 0; n < rows; ++n) {
        std::int32_t t = tokens.i32()[n];
        const float* d = dout.f32() + n * hidden;
        float* e = dwte.f32() + t * hidden;
        float* p = dwpe.f32() + (n % seq) * hidden;
        for (std::int64_t j = 0; j < hidden; ++j) {
          e[j] += d[j];
          p[j] += d[j];
        }
      }
    });
  }
  void cross_entropy_forward(Stream& s, TensorRef logits, TensorRef targets, TensorRef losses,
                             TensorRef lse, std::int64_t rows, std::int64_t vocab) override {
    require_numel(logits, rows * vocab, "cross_entropy logits");
    s.enqueue_host([=] {
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* x = logits.f32() + r * vocab;
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
    s.enqueue_host([=] {
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* x = logits.f32() + r * vocab;
        float* d = dlogits.f32() + r * vocab;
        float l = lse.f32()[r];
        for (std::int64_t j = 0; j < vocab; ++j) d[j] = std::exp(x[j] - l) * grad_scale;
        d[targets.i32()[r]] -= grad_scale;
      }
    });
  }
  void adamw_step(Stream& s, TensorRef param, TensorRef grad, TensorRef m, TensorRef v,
                  const AdamWParams& p) override {
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
    // 64-byte alignment for vectorised Eigen kernels.
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p)
      throw RuntimeFailure("cpu device: out of memory allocating " + std::to_string(bytes) +
                           " bytes");
    counter(space).add(bytes);
    return p;
  }
  void raw_free(void* data, std::size_t bytes, MemorySpace space) noexcept override {
    std::free(data);
    counter(space).sub(bytes);
  }

 private:
  SpaceCounter& counter(MemorySpace s) {
    return s == MemorySpace::Device ? device_mem_ : host_mem_;
  }
  const SpaceCounter& counter(MemorySpace s) const {
    return s == MemorySpace::Device ? device_mem_ : host_mem_;
  }

  CpuDeviceOptions options_;
  CpuStream compute_, comm_, copy_;
  SpaceCounter device_mem_, host_mem_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(const CpuDeviceOptions& options) {
  return std::make_unique<CpuDevice>(options);
}

}  // namespace cephalo::backend
