// float16 and bfloat16 <-> float32, bit-exact, round-to-nearest-even.
// Reducing 16-bit floats through float32 and rounding once gives the correctly
// rounded result for +, *, min and max (float32 has more than 2p+2 bits), so
// results match NumPy/ml_dtypes element arithmetic bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

namespace horo {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float half_to_float(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = (h & 0x7fffu) << 13;
  const uint32_t exp = shifted_exp & o;
  o += (127 - 15) << 23;
  if (exp == shifted_exp) {
    o += (128 - 16) << 23;  // Inf / NaN
  } else if (exp == 0) {
    o += 1 << 23;  // subnormal: renormalise through the FPU
    o = float_to_bits(bits_to_float(o) - bits_to_float(113u << 23));
  }
  o |= static_cast<uint32_t>(h & 0x8000u) << 16;
  return bits_to_float(o);
}

inline uint16_t float_to_half(float value) {
  const uint32_t f32_infinity = 255u << 23;
  const uint32_t f16_max = (127u + 16) << 23;
  const uint32_t denorm_magic = ((127u - 15) + (23 - 10) + 1) << 23;
  uint32_t f = float_to_bits(value);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint32_t o;
  if (f >= f16_max) {
    o = (f > f32_infinity) ? 0x7e00 : 0x7c00;  // NaN stays NaN, overflow -> Inf
  } else if (f < (113u << 23)) {
    o = float_to_bits(bits_to_float(f) + bits_to_float(denorm_magic)) - denorm_magic;
  } else {
    const uint32_t mantissa_odd = (f >> 13) & 1;
    f += (static_cast<uint32_t>(15 - 127) << 23) + 0xfff;
    f += mantissa_odd;
    o = f >> 13;
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

inline float bfloat16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bfloat16(float value) {
  uint32_t u = float_to_bits(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace horo
