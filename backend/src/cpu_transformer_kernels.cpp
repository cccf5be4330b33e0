// The CPU device's transformer kernels (layer norm, GELU, causal attention, embedding,
// cross-entropy, AdamW): plain fp32 loops, the reference the CUDA device is tested against.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "cephalo/core/error.hpp"
#include "cpu_device_impl.hpp"
#include "half.hpp"

namespace cephalo::backend::cpu_detail {

namespace {

float gelu(float x) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}
float gelu_grad(float x) {
  constexpr float k = 0.7978845608028654f;
  float u = k * (x + 0.044715f * x * x * x);
  float t = std::tanh(u);
  float du = k * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// Token n of `tokens`, refused (naming the kernel) when outside the vocabulary: a bad id in the
// data would otherwise index past the embedding table.
std::int64_t token_at(const TensorRef& tokens, std::int64_t n, std::int64_t vocab,
                      const char* kernel) {
  const std::int32_t t = tokens.i32()[n];
  if (t < 0 || t >= vocab)
    throw RuntimeFailure(std::string(kernel) + ": token id " + std::to_string(t) +
                         " outside the vocabulary of " + std::to_string(vocab));
  return t;
}

}  // namespace

void CpuDevice::do_layer_norm_forward(Stream& s, TensorRef x, TensorRef gamma, TensorRef beta,
                                      TensorRef y, TensorRef mean, TensorRef rstd,
                                      std::int64_t rows, std::int64_t cols, float eps) {
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

void CpuDevice::do_layer_norm_backward(Stream& s, TensorRef x, TensorRef gamma, TensorRef mean,
                                       TensorRef rstd, TensorRef dy, TensorRef dx, TensorRef dgamma,
                                       TensorRef dbeta, std::int64_t rows, std::int64_t cols) {
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

void CpuDevice::do_gelu_forward(Stream& s, TensorRef x, TensorRef y) {
  s.enqueue_host([=] {
    Fp32In xf(x, x.numel);
    Fp32Out yf(y, x.numel, Start::Undefined);
    for (std::int64_t i = 0; i < x.numel; ++i) yf.get()[i] = gelu(xf.get()[i]);
    yf.commit();
  });
}

void CpuDevice::do_gelu_backward(Stream& s, TensorRef x, TensorRef dy, TensorRef dx) {
  s.enqueue_host([=] {
    Fp32In xf(x, x.numel), dyf(dy, x.numel);
    Fp32Out dxf(dx, x.numel, Start::Undefined);
    for (std::int64_t i = 0; i < x.numel; ++i) dxf.get()[i] = dyf.get()[i] * gelu_grad(xf.get()[i]);
    dxf.commit();
  });
}

void CpuDevice::do_attention_forward(Stream& s, const AttentionShape& sh, TensorRef qkv,
                                     TensorRef out, TensorRef lse) {
  const std::int64_t C = sh.heads * sh.head_dim, T = sh.seq, D = sh.head_dim;
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

void CpuDevice::do_attention_backward(Stream& s, const AttentionShape& sh, TensorRef qkv,
                                      TensorRef out, TensorRef lse, TensorRef dout,
                                      TensorRef dqkv) {
  const std::int64_t C = sh.heads * sh.head_dim, T = sh.seq, D = sh.head_dim;
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

void CpuDevice::do_embedding_forward(Stream& s, TensorRef tokens, TensorRef wte, TensorRef wpe,
                                     TensorRef out, std::int64_t rows, std::int64_t seq,
                                     std::int64_t hidden, VocabSlice vocab) {
  const std::int64_t local = wte.numel / hidden;
  s.enqueue_host([=] {
    Fp32In wtef(wte, local * hidden), wpef(wpe, wpe.empty() ? 0 : std::min(rows, seq) * hidden);
    Fp32Out outf(out, rows * hidden, Start::Undefined);
    for (std::int64_t n = 0; n < rows; ++n) {
      const std::int64_t t = token_at(tokens, n, vocab.size, "embedding") - vocab.begin;
      const float* e = t >= 0 && t < local ? wtef.get() + t * hidden : nullptr;
      const float* p = wpe.empty() ? nullptr : wpef.get() + (n % seq) * hidden;
      float* o = outf.get() + n * hidden;
      // Each output element is one fp32 addition (or none), so a row split over the vocabulary
      // and summed with zeros equals the unsplit row bit for bit.
      for (std::int64_t j = 0; j < hidden; ++j)
        o[j] = e && p ? e[j] + p[j] : e ? e[j] : p ? p[j] : 0.0f;
    }
    outf.commit();
  });
}

void CpuDevice::do_embedding_backward(Stream& s, TensorRef tokens, TensorRef dout, TensorRef dwte,
                                      TensorRef dwpe, std::int64_t rows, std::int64_t seq,
                                      std::int64_t hidden, VocabSlice vocab) {
  const std::int64_t local = dwte.numel / hidden;
  s.enqueue_host([=] {
    Fp32In df(dout, rows * hidden);
    Fp32Out ef(dwte, local * hidden, Start::Current);
    Fp32Out pf(dwpe, dwpe.empty() ? 0 : std::min(rows, seq) * hidden, Start::Current);
    for (std::int64_t n = 0; n < rows; ++n) {
      const std::int64_t t = token_at(tokens, n, vocab.size, "embedding_backward") - vocab.begin;
      const float* d = df.get() + n * hidden;
      if (t >= 0 && t < local) {
        float* e = ef.get() + t * hidden;
        for (std::int64_t j = 0; j < hidden; ++j) e[j] += d[j];
      }
      if (!dwpe.empty()) {
        float* p = pf.get() + (n % seq) * hidden;
        for (std::int64_t j = 0; j < hidden; ++j) p[j] += d[j];
      }
    }
    ef.commit();
    if (!dwpe.empty()) pf.commit();
  });
}

void CpuDevice::do_cross_entropy_forward(Stream& s, TensorRef logits, TensorRef targets,
                                         TensorRef losses, TensorRef lse, std::int64_t rows,
                                         std::int64_t vocab) {
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

void CpuDevice::do_cross_entropy_backward(Stream& s, TensorRef logits, TensorRef targets,
                                          TensorRef lse, TensorRef dlogits, std::int64_t rows,
                                          std::int64_t vocab, float grad_scale,
                                          std::int64_t vocab_begin) {
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
      const std::int64_t t = targets.i32()[r] - vocab_begin;
      if (t >= 0 && t < vocab) d[t] -= grad_scale;
    }
    df.commit();
  });
}

void CpuDevice::do_cross_entropy_row_max(Stream& s, TensorRef logits, TensorRef row_max,
                                         std::int64_t rows, std::int64_t vocab) {
  s.enqueue_host([=] {
    Fp32In lf(logits, rows * vocab);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* x = lf.get() + r * vocab;
      row_max.f32()[r] = *std::max_element(x, x + vocab);
    }
  });
}

void CpuDevice::do_cross_entropy_partial_sums(Stream& s, TensorRef logits, TensorRef targets,
                                              TensorRef row_max, TensorRef sum_exp,
                                              TensorRef target_logit, std::int64_t rows,
                                              std::int64_t vocab, std::int64_t vocab_begin) {
  s.enqueue_host([=] {
    Fp32In lf(logits, rows * vocab);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* x = lf.get() + r * vocab;
      const float mx = row_max.f32()[r];
      double z = 0;
      for (std::int64_t j = 0; j < vocab; ++j) z += std::exp(x[j] - mx);
      sum_exp.f32()[r] = static_cast<float>(z);
      const std::int64_t t = targets.i32()[r] - vocab_begin;
      target_logit.f32()[r] = t >= 0 && t < vocab ? x[t] : 0.0f;
    }
  });
}

void CpuDevice::do_cross_entropy_combine(Stream& s, TensorRef row_max, TensorRef sum_exp,
                                         TensorRef target_logit, TensorRef losses, TensorRef lse,
                                         std::int64_t rows) {
  s.enqueue_host([=] {
    for (std::int64_t r = 0; r < rows; ++r) {
      const float l = row_max.f32()[r] + static_cast<float>(std::log(sum_exp.f32()[r]));
      lse.f32()[r] = l;
      losses.f32()[r] = l - target_logit.f32()[r];
    }
  });
}

void CpuDevice::do_adamw_step(Stream& s, TensorRef param, TensorRef grad, TensorRef m, TensorRef v,
                              const AdamWParams& p) {
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

}  // namespace cephalo::backend::cpu_detail
