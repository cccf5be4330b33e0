#pragma once
// Scalar and buffer conversions between fp32 and the two 16-bit floating formats of the
// backend (bf16: 1-8-7, fp16: 1-5-10), as raw bit patterns. Rounding is round-to-nearest-even,
// the IEEE default and what CUDA's __float2bfloat16 / __float2half do, so the CPU device
// rounds exactly as the GPU does. fp16 overflow gives inf, fp16 subnormals are produced and
// read exactly, NaN stays NaN (quieted). Written with integer arithmetic only, so the result
// does not depend on the FPU's rounding mode or flush-to-zero setting, and no compiler
// extension (_Float16, __bf16) is needed.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cephalo/backend/tensor.hpp"

namespace cephalo::backend {

inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  // NaN: truncating could clear every payload bit left and turn it into inf; set the quiet bit.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff (+1 when the kept lsb is odd) carries into the kept bits exactly when the
  // dropped half is above the midpoint, or at it with an odd lsb: round-to-nearest-even. A carry
  // out of the largest finite values lands on the inf pattern, which is the right overflow.
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float bf16_to_float(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

inline std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: keep the top payload bits, force the quiet bit
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  // 65520 = 0x477ff000 is halfway between the largest finite fp16 (65504) and 2^16; its tie
  // rounds to the even neighbour 2^16, i.e. inf. So everything from there up (inf too) is inf.
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // >= 2^-14: normal in fp16. Rebias the exponent 127 -> 15.
    const std::uint32_t r = a - (112u << 23);
    return static_cast<std::uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  // fp16 subnormal (or zero): the result is round(|f| / 2^-24) in the 10 mantissa bits. With
  // the implicit bit, |f| = mant * 2^(e - 150), so the quotient is mant >> (126 - e).
  const std::uint32_t e = a >> 23;
  const std::uint32_t shift = 126u - e;  // >= 14 here; fp32 subnormals (e = 0) give 126
  if (shift > 24) return static_cast<std::uint16_t>(sign);  // below half of 2^-24
  const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  std::uint32_t q = mant >> shift;
  const std::uint32_t rest = mant & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // may carry into 0x400 = 2^-14, correct
  return static_cast<std::uint16_t>(sign | q);
}

inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  std::uint32_t m = h & 0x3ffu;
  if (e == 0x1fu)  // inf or NaN (a nonzero payload stays nonzero)
    return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  if (e != 0) return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return std::bit_cast<float>(sign);
  // Subnormal m * 2^-24: normalise so the leading bit becomes the implicit one.
  std::uint32_t exp = 113;  // the fp32 biased exponent of 2^-14, lowered once per shift
  while (!(m & 0x400u)) {
    m <<= 1;
    --exp;
  }
  return std::bit_cast<float>(sign | (exp << 23) | ((m & 0x3ffu) << 13));
}

// Rounds `value` to the bits of a 16-bit floating type (BF16 or F16).
inline std::uint16_t float_to_half_bits(float value, ElemType type) {
  return type == ElemType::BF16 ? float_to_bf16(value) : float_to_f16(value);
}

// The value a tensor of floating type `type` holds after storing `value` (rounded once).
inline float round_to(float value, ElemType type) {
  if (type == ElemType::BF16) return bf16_to_float(float_to_bf16(value));
  if (type == ElemType::F16) return f16_to_float(float_to_f16(value));
  return value;
}

// n elements of floating type `type` at `src` -> fp32 at `dst` (exact: fp32 holds both formats).
inline void load_f32(const void* src, ElemType type, float* dst, std::size_t n) {
  if (type == ElemType::F32) {
    if (n) std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  const auto* h = static_cast<const std::uint16_t*>(src);
  if (type == ElemType::BF16)
    for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(h[i]);
  else
    for (std::size_t i = 0; i < n; ++i) dst[i] = f16_to_float(h[i]);
}

// n fp32 values at `src` -> floating type `type` at `dst`, each rounded once.
inline void store_f32(const float* src, void* dst, ElemType type, std::size_t n) {
  if (type == ElemType::F32) {
    if (n) std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  auto* h = static_cast<std::uint16_t*>(dst);
  if (type == ElemType::BF16)
    for (std::size_t i = 0; i < n; ++i) h[i] = float_to_bf16(src[i]);
  else
    for (std::size_t i = 0; i < n; ++i) h[i] = float_to_f16(src[i]);
}

}  // namespace cephalo::backend
