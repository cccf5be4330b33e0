// The device API's front functions (device_runtime.hpp, device_kernels.hpp): the element-type
// contract and the size preconditions, checked once here for every device before its do_*
// implementation runs.
#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

#include "cephalo/backend/device.hpp"
#include "cephalo/core/error.hpp"

namespace cephalo::backend {

namespace {

bool floating(ElemType t) { return t != ElemType::I32; }
// All of `ts` are the compute type `t`, which must be floating.
bool all_are(ElemType t, std::initializer_list<ElemType> ts) {
  return floating(t) && std::all_of(ts.begin(), ts.end(), [t](ElemType u) { return u == t; });
}
// A parameter-gradient output: the compute type or F32.
bool grad_of(ElemType g, ElemType t) { return g == t || g == ElemType::F32; }

// Throws "<kind> device: <kernel> does not take A=bf16, B=f16, C=f32 (<rule>)" unless `ok`.
void expect_types(const DeviceKernels& dev, bool ok, const char* kernel,
                  std::initializer_list<std::pair<const char*, ElemType>> args, const char* rule) {
  if (ok) return;
  std::string got;
  for (const auto& [name, type] : args)
    got += (got.empty() ? "" : ", ") + std::string(name) + "=" + to_string(type);
  throw RuntimeFailure(dev.kind() + " device: " + kernel + " does not take " + got + " (" + rule +
                       ")");
}

void require_numel(const DeviceKernels& dev, const TensorRef& t, std::int64_t n, const char* what) {
  if (t.numel < n)
    throw RuntimeFailure(dev.kind() + " device: " + what + " tensor has " +
                         std::to_string(t.numel) + " elements, needs " + std::to_string(n));
}

void require_bytes(const DeviceRuntime& dev, std::size_t have, std::size_t need, const char* what) {
  if (have < need)
    throw RuntimeFailure(dev.kind() + " device: " + what + " of " + std::to_string(need) +
                         " bytes, but the device tensor holds " + std::to_string(have));
}

}  // namespace

void DeviceRuntime::copy(Stream& stream, TensorRef dst, TensorRef src) {
  require_bytes(*this, dst.bytes(), src.bytes(), "copy");
  do_copy(stream, dst, src);
}

void DeviceRuntime::upload(TensorRef dst, const void* host, std::size_t bytes) {
  require_bytes(*this, dst.bytes(), bytes, "upload");
  do_upload(dst, host, bytes);
}

void DeviceRuntime::download(void* host, TensorRef src, std::size_t bytes) {
  require_bytes(*this, src.bytes(), bytes, "download");
  do_download(host, src, bytes);
}

void DeviceKernels::fill(Stream& s, TensorRef x, float value) {
  expect_types(*this, floating(x.type), "fill", {{"x", x.type}}, "x is a floating type");
  do_fill(s, x, value);
}

void DeviceKernels::scale(Stream& s, TensorRef x, float alpha) {
  expect_types(*this, floating(x.type), "scale", {{"x", x.type}}, "x is a floating type");
  do_scale(s, x, alpha);
}

void DeviceKernels::axpy(Stream& s, float alpha, TensorRef x, TensorRef y) {
  expect_types(*this, floating(x.type) && floating(y.type), "axpy", {{"x", x.type}, {"y", y.type}},
               "x and y are floating types");
  require_numel(*this, y, x.numel, "axpy y");
  do_axpy(s, alpha, x, y);
}

void DeviceKernels::cast(Stream& s, TensorRef src, TensorRef dst) {
  expect_types(*this, floating(src.type) && floating(dst.type), "cast",
               {{"src", src.type}, {"dst", dst.type}}, "src and dst are floating types");
  require_numel(*this, dst, src.numel, "cast dst");
  do_cast(s, src, dst);
}

void DeviceKernels::sum(Stream& s, TensorRef x, TensorRef out) {
  expect_types(*this, floating(x.type) && out.type == ElemType::F32, "sum",
               {{"x", x.type}, {"out", out.type}}, "x is a floating type, out is f32");
  require_numel(*this, out, 1, "sum out");
  do_sum(s, x, out);
}

void DeviceKernels::gemm(Stream& s, Transpose ta, Transpose tb, std::int64_t m, std::int64_t n,
                         std::int64_t k, float alpha, TensorRef a, TensorRef b, float beta,
                         TensorRef c) {
  expect_types(*this, all_are(a.type, {b.type}) && grad_of(c.type, a.type), "gemm",
               {{"A", a.type}, {"B", b.type}, {"C", c.type}},
               "A and B share the compute type T; C is T or f32");
  require_numel(*this, a, m * k, "gemm A");
  require_numel(*this, b, k * n, "gemm B");
  require_numel(*this, c, m * n, "gemm C");
  do_gemm(s, ta, tb, m, n, k, alpha, a, b, beta, c);
}

void DeviceKernels::add_bias(Stream& s, TensorRef y, TensorRef bias, std::int64_t rows,
                             std::int64_t cols) {
  expect_types(*this, all_are(y.type, {bias.type}), "add_bias",
               {{"y", y.type}, {"bias", bias.type}}, "y and bias share the compute type");
  require_numel(*this, y, rows * cols, "add_bias y");
  require_numel(*this, bias, cols, "add_bias bias");
  do_add_bias(s, y, bias, rows, cols);
}

void DeviceKernels::bias_backward(Stream& s, TensorRef dy, TensorRef dbias, std::int64_t rows,
                                  std::int64_t cols) {
  expect_types(*this, floating(dy.type) && grad_of(dbias.type, dy.type), "bias_backward",
               {{"dy", dy.type}, {"dbias", dbias.type}},
               "dy is the compute type T; dbias is T or f32");
  require_numel(*this, dy, rows * cols, "bias_backward dy");
  require_numel(*this, dbias, cols, "bias_backward dbias");
  do_bias_backward(s, dy, dbias, rows, cols);
}

void DeviceKernels::layer_norm_forward(Stream& s, TensorRef x, TensorRef gamma, TensorRef beta,
                                       TensorRef y, TensorRef mean, TensorRef rstd,
                                       std::int64_t rows, std::int64_t cols, float eps) {
  expect_types(*this,
               all_are(x.type, {gamma.type, beta.type, y.type}) && mean.type == ElemType::F32 &&
                   rstd.type == ElemType::F32,
               "layer_norm_forward",
               {{"x", x.type},
                {"gamma", gamma.type},
                {"beta", beta.type},
                {"y", y.type},
                {"mean", mean.type},
                {"rstd", rstd.type}},
               "x, gamma, beta, y share the compute type; mean, rstd are f32");
  require_numel(*this, x, rows * cols, "layer_norm x");
  require_numel(*this, gamma, cols, "layer_norm gamma");
  require_numel(*this, beta, cols, "layer_norm beta");
  require_numel(*this, y, rows * cols, "layer_norm y");
  require_numel(*this, mean, rows, "layer_norm mean");
  require_numel(*this, rstd, rows, "layer_norm rstd");
  do_layer_norm_forward(s, x, gamma, beta, y, mean, rstd, rows, cols, eps);
}

void DeviceKernels::layer_norm_backward(Stream& s, TensorRef x, TensorRef gamma, TensorRef mean,
                                        TensorRef rstd, TensorRef dy, TensorRef dx,
                                        TensorRef dgamma, TensorRef dbeta, std::int64_t rows,
                                        std::int64_t cols) {
  expect_types(*this,
               all_are(x.type, {gamma.type, dy.type, dx.type}) && mean.type == ElemType::F32 &&
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
  require_numel(*this, x, rows * cols, "layer_norm_backward x");
  require_numel(*this, gamma, cols, "layer_norm_backward gamma");
  require_numel(*this, mean, rows, "layer_norm_backward mean");
  require_numel(*this, rstd, rows, "layer_norm_backward rstd");
  require_numel(*this, dy, rows * cols, "layer_norm_backward dy");
  require_numel(*this, dx, rows * cols, "layer_norm_backward dx");
  require_numel(*this, dgamma, cols, "layer_norm_backward dgamma");
  require_numel(*this, dbeta, cols, "layer_norm_backward dbeta");
  do_layer_norm_backward(s, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols);
}

void DeviceKernels::gelu_forward(Stream& s, TensorRef x, TensorRef y) {
  expect_types(*this, all_are(x.type, {y.type}), "gelu_forward", {{"x", x.type}, {"y", y.type}},
               "x and y share the compute type");
  require_numel(*this, y, x.numel, "gelu y");
  do_gelu_forward(s, x, y);
}

void DeviceKernels::gelu_backward(Stream& s, TensorRef x, TensorRef dy, TensorRef dx) {
  expect_types(*this, all_are(x.type, {dy.type, dx.type}), "gelu_backward",
               {{"x", x.type}, {"dy", dy.type}, {"dx", dx.type}},
               "x, dy, dx share the compute type");
  require_numel(*this, dy, x.numel, "gelu_backward dy");
  require_numel(*this, dx, x.numel, "gelu_backward dx");
  do_gelu_backward(s, x, dy, dx);
}

void DeviceKernels::attention_forward(Stream& s, const AttentionShape& sh, TensorRef qkv,
                                      TensorRef out, TensorRef lse) {
  expect_types(*this, all_are(qkv.type, {out.type}) && lse.type == ElemType::F32,
               "attention_forward", {{"qkv", qkv.type}, {"out", out.type}, {"lse", lse.type}},
               "qkv and out share the compute type; lse is f32");
  const std::int64_t C = sh.heads * sh.head_dim, T = sh.seq;
  require_numel(*this, qkv, sh.batch * T * 3 * C, "attention qkv");
  require_numel(*this, out, sh.batch * T * C, "attention out");
  require_numel(*this, lse, sh.batch * sh.heads * T, "attention lse");
  do_attention_forward(s, sh, qkv, out, lse);
}

void DeviceKernels::attention_backward(Stream& s, const AttentionShape& sh, TensorRef qkv,
                                       TensorRef out, TensorRef lse, TensorRef dout,
                                       TensorRef dqkv) {
  expect_types(*this,
               all_are(qkv.type, {out.type, dout.type, dqkv.type}) && lse.type == ElemType::F32,
               "attention_backward",
               {{"qkv", qkv.type},
                {"out", out.type},
                {"lse", lse.type},
                {"dout", dout.type},
                {"dqkv", dqkv.type}},
               "qkv, out, dout, dqkv share the compute type; lse is f32");
  const std::int64_t C = sh.heads * sh.head_dim, T = sh.seq;
  require_numel(*this, qkv, sh.batch * T * 3 * C, "attention_backward qkv");
  require_numel(*this, out, sh.batch * T * C, "attention_backward out");
  require_numel(*this, lse, sh.batch * sh.heads * T, "attention_backward lse");
  require_numel(*this, dout, sh.batch * T * C, "attention_backward dout");
  require_numel(*this, dqkv, sh.batch * T * 3 * C, "attention_backward dqkv");
  do_attention_backward(s, sh, qkv, out, lse, dout, dqkv);
}

// The slice a vocabulary-parallel kernel was given, checked and resolved: a default slice is
// the whole vocabulary of `local` ids; otherwise the local ids must lie inside it.
static VocabSlice resolve_vocab(const DeviceKernels& dev, VocabSlice v, std::int64_t local,
                                const char* kernel) {
  if (v.size == 0 && v.begin == 0) return {0, local};
  if (v.begin < 0 || v.size <= 0 || v.begin + local > v.size)
    throw RuntimeFailure(dev.kind() + " device: " + kernel + " vocabulary slice [" +
                         std::to_string(v.begin) + ", " + std::to_string(v.begin + local) +
                         ") is not inside a vocabulary of " + std::to_string(v.size) + " ids");
  return v;
}

static void require_rows_of(const DeviceKernels& dev, const TensorRef& t, std::int64_t width,
                            const char* what) {
  if (width <= 0 || t.numel % width != 0)
    throw RuntimeFailure(dev.kind() + " device: " + what + " tensor has " +
                         std::to_string(t.numel) + " elements, not rows of " +
                         std::to_string(width));
}

void DeviceKernels::embedding_forward(Stream& s, TensorRef tokens, TensorRef wte, TensorRef wpe,
                                      TensorRef out, std::int64_t rows, std::int64_t seq,
                                      std::int64_t hidden, VocabSlice vocab) {
  // An empty wpe (no position term) has no type to agree with.
  expect_types(*this,
               tokens.type == ElemType::I32 &&
                   all_are(wte.type, {wpe.empty() ? wte.type : wpe.type, out.type}),
               "embedding_forward",
               {{"tokens", tokens.type}, {"wte", wte.type}, {"wpe", wpe.type}, {"out", out.type}},
               "tokens are i32; wte, wpe, out share the compute type");
  require_numel(*this, tokens, rows, "embedding tokens");
  require_rows_of(*this, wte, hidden, "embedding wte");
  if (!wpe.empty()) require_numel(*this, wpe, std::min(rows, seq) * hidden, "embedding wpe");
  require_numel(*this, out, rows * hidden, "embedding out");
  vocab = resolve_vocab(*this, vocab, wte.numel / hidden, "embedding_forward");
  do_embedding_forward(s, tokens, wte, wpe, out, rows, seq, hidden, vocab);
}

void DeviceKernels::embedding_backward(Stream& s, TensorRef tokens, TensorRef dout, TensorRef dwte,
                                       TensorRef dwpe, std::int64_t rows, std::int64_t seq,
                                       std::int64_t hidden, VocabSlice vocab) {
  expect_types(
      *this,
      tokens.type == ElemType::I32 && floating(dout.type) && grad_of(dwte.type, dout.type) &&
          (dwpe.empty() || grad_of(dwpe.type, dout.type)),
      "embedding_backward",
      {{"tokens", tokens.type}, {"dout", dout.type}, {"dwte", dwte.type}, {"dwpe", dwpe.type}},
      "tokens are i32; dout is the compute type T; dwte, dwpe are T or f32");
  require_numel(*this, tokens, rows, "embedding_backward tokens");
  require_numel(*this, dout, rows * hidden, "embedding_backward dout");
  require_rows_of(*this, dwte, hidden, "embedding_backward dwte");
  if (!dwpe.empty())
    require_numel(*this, dwpe, std::min(rows, seq) * hidden, "embedding_backward dwpe");
  vocab = resolve_vocab(*this, vocab, dwte.numel / hidden, "embedding_backward");
  do_embedding_backward(s, tokens, dout, dwte, dwpe, rows, seq, hidden, vocab);
}

void DeviceKernels::cross_entropy_forward(Stream& s, TensorRef logits, TensorRef targets,
                                          TensorRef losses, TensorRef lse, std::int64_t rows,
                                          std::int64_t vocab) {
  expect_types(*this,
               floating(logits.type) && targets.type == ElemType::I32 &&
                   losses.type == ElemType::F32 && lse.type == ElemType::F32,
               "cross_entropy_forward",
               {{"logits", logits.type},
                {"targets", targets.type},
                {"losses", losses.type},
                {"lse", lse.type}},
               "logits are the compute type; targets are i32; losses, lse are f32");
  require_numel(*this, logits, rows * vocab, "cross_entropy logits");
  require_numel(*this, targets, rows, "cross_entropy targets");
  require_numel(*this, losses, rows, "cross_entropy losses");
  require_numel(*this, lse, rows, "cross_entropy lse");
  do_cross_entropy_forward(s, logits, targets, losses, lse, rows, vocab);
}

void DeviceKernels::cross_entropy_backward(Stream& s, TensorRef logits, TensorRef targets,
                                           TensorRef lse, TensorRef dlogits, std::int64_t rows,
                                           std::int64_t vocab, float grad_scale,
                                           std::int64_t vocab_begin) {
  expect_types(*this,
               all_are(logits.type, {dlogits.type}) && targets.type == ElemType::I32 &&
                   lse.type == ElemType::F32,
               "cross_entropy_backward",
               {{"logits", logits.type},
                {"targets", targets.type},
                {"lse", lse.type},
                {"dlogits", dlogits.type}},
               "logits and dlogits share the compute type; targets are i32; lse is f32");
  require_numel(*this, logits, rows * vocab, "cross_entropy_backward logits");
  require_numel(*this, targets, rows, "cross_entropy_backward targets");
  require_numel(*this, lse, rows, "cross_entropy_backward lse");
  require_numel(*this, dlogits, rows * vocab, "cross_entropy_backward dlogits");
  if (vocab_begin < 0)
    throw RuntimeFailure(kind() + " device: cross_entropy_backward vocab_begin " +
                         std::to_string(vocab_begin) + " is negative");
  do_cross_entropy_backward(s, logits, targets, lse, dlogits, rows, vocab, grad_scale, vocab_begin);
}

void DeviceKernels::cross_entropy_row_max(Stream& s, TensorRef logits, TensorRef row_max,
                                          std::int64_t rows, std::int64_t vocab) {
  expect_types(*this, floating(logits.type) && row_max.type == ElemType::F32,
               "cross_entropy_row_max", {{"logits", logits.type}, {"row_max", row_max.type}},
               "logits are the compute type; row_max is f32");
  // A row without columns has no maximum (and a rank of a vocabulary-parallel head holds at
  // least one id: the model refuses a vocabulary smaller than the tensor-parallel degree).
  if (vocab <= 0)
    throw RuntimeFailure(kind() + " device: cross_entropy_row_max over " + std::to_string(vocab) +
                         " columns");
  require_numel(*this, logits, rows * vocab, "cross_entropy_row_max logits");
  require_numel(*this, row_max, rows, "cross_entropy_row_max row_max");
  do_cross_entropy_row_max(s, logits, row_max, rows, vocab);
}

void DeviceKernels::cross_entropy_partial_sums(Stream& s, TensorRef logits, TensorRef targets,
                                               TensorRef row_max, TensorRef sum_exp,
                                               TensorRef target_logit, std::int64_t rows,
                                               std::int64_t vocab, std::int64_t vocab_begin) {
  expect_types(*this,
               floating(logits.type) && targets.type == ElemType::I32 &&
                   all_are(ElemType::F32, {row_max.type, sum_exp.type, target_logit.type}),
               "cross_entropy_partial_sums",
               {{"logits", logits.type},
                {"targets", targets.type},
                {"row_max", row_max.type},
                {"sum_exp", sum_exp.type},
                {"target_logit", target_logit.type}},
               "logits are the compute type; targets are i32; row_max, sum_exp, target_logit "
               "are f32");
  require_numel(*this, logits, rows * vocab, "cross_entropy_partial_sums logits");
  require_numel(*this, targets, rows, "cross_entropy_partial_sums targets");
  for (const auto& [t, what] : {std::pair{row_max, "cross_entropy_partial_sums row_max"},
                                {sum_exp, "cross_entropy_partial_sums sum_exp"},
                                {target_logit, "cross_entropy_partial_sums target_logit"}})
    require_numel(*this, t, rows, what);
  if (vocab_begin < 0)
    throw RuntimeFailure(kind() + " device: cross_entropy_partial_sums vocab_begin " +
                         std::to_string(vocab_begin) + " is negative");
  do_cross_entropy_partial_sums(s, logits, targets, row_max, sum_exp, target_logit, rows, vocab,
                                vocab_begin);
}

void DeviceKernels::cross_entropy_combine(Stream& s, TensorRef row_max, TensorRef sum_exp,
                                          TensorRef target_logit, TensorRef losses, TensorRef lse,
                                          std::int64_t rows) {
  expect_types(*this,
               all_are(ElemType::F32,
                       {row_max.type, sum_exp.type, target_logit.type, losses.type, lse.type}),
               "cross_entropy_combine",
               {{"row_max", row_max.type},
                {"sum_exp", sum_exp.type},
                {"target_logit", target_logit.type},
                {"losses", losses.type},
                {"lse", lse.type}},
               "every row statistic is f32");
  for (const auto& [t, what] : {std::pair{row_max, "cross_entropy_combine row_max"},
                                {sum_exp, "cross_entropy_combine sum_exp"},
                                {target_logit, "cross_entropy_combine target_logit"},
                                {losses, "cross_entropy_combine losses"},
                                {lse, "cross_entropy_combine lse"}})
    require_numel(*this, t, rows, what);
  do_cross_entropy_combine(s, row_max, sum_exp, target_logit, losses, lse, rows);
}

void DeviceKernels::adamw_step(Stream& s, TensorRef param, TensorRef grad, TensorRef m, TensorRef v,
                               const AdamWParams& p) {
  expect_types(*this, all_are(ElemType::F32, {param.type, grad.type, m.type, v.type}), "adamw_step",
               {{"param", param.type}, {"grad", grad.type}, {"m", m.type}, {"v", v.type}},
               "master weights, gradient shard and moments are all f32");
  require_numel(*this, grad, param.numel, "adamw grad");
  require_numel(*this, m, param.numel, "adamw m");
  require_numel(*this, v, param.numel, "adamw v");
  do_adamw_step(s, param, grad, m, v, p);
}

}  // namespace cephalo::backend
