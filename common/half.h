// Conversions between float and the 16-bit float formats (IEEE binary16 and bfloat16).
//
// Both conversions from float round to nearest, ties to even, and keep NaN and infinities. They
// are plain functions on bit patterns so that CPU code needs no compiler support for _Float16.
#ifndef KVSTORE_COMMON_HALF_H_
#define KVSTORE_COMMON_HALF_H_

#include <cstdint>
#include <cstring>

namespace kvstore {

// HalfToFloat returns the float with the value of the binary16 bit pattern `h` (exact).
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1Fu) {  // Inf or NaN.
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {  // Normal.
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // Zero.
    bits = sign;
  } else {  // Subnormal: normalise.
    uint32_t e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// FloatToHalf returns the binary16 bit pattern nearest to `f` (ties to even); values beyond the
// binary16 range become infinities.
inline uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // Inf or NaN (keep a quiet NaN).
    return sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u);
  }
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // Rounds to beyond 65504: infinity.
  const int32_t exponent = static_cast<int32_t>(abs >> 23) - 127;
  if (exponent >= -14) {  // Normal binary16.
    uint32_t mantissa = abs & 0x7FFFFFu;
    uint32_t half = (static_cast<uint32_t>(exponent + 15) << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // May carry into exponent.
    return sign | static_cast<uint16_t>(half);
  }
  if (exponent < -25) return sign;  // Below half the smallest subnormal: zero.
  // Subnormal binary16: shift the full mantissa (with hidden bit) into place.
  const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
  const int shift = -exponent - 1;  // 14..24: bits dropped below the binary16 subnormal ulp.
  uint32_t half = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

// BFloat16ToFloat returns the float with the value of the bfloat16 bit pattern `b` (exact).
inline float BFloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// FloatToBFloat16 returns the bfloat16 bit pattern nearest to `f` (ties to even).
inline uint16_t FloatToBFloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace kvstore

#endif  // KVSTORE_COMMON_HALF_H_
