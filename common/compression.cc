#include "common/compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvstore {
namespace {

constexpr int k2BitWord = 16;
constexpr int k1BitWord = 32;

// Quantize2BitWord encodes `count` (<= 16) values into the 4 bytes at `out`. Positions past
// `count` get code 00.
inline void Quantize2BitWord(float t, const float* g, float* r, int count, uint8_t* out) {
  float grad[k2BitWord] = {};
  float res[k2BitWord] = {};
  std::memcpy(grad, g, sizeof(float) * count);
  std::memcpy(res, r, sizeof(float) * count);
  uint8_t codes[k2BitWord];
  for (int j = 0; j < k2BitWord; ++j) {
    float v = res[j] + grad[j];
    const bool pos = v >= t;
    const bool neg = v <= -t;
    v -= pos ? t : 0.0f;
    v += neg ? t : 0.0f;
    res[j] = v;
    codes[j] = static_cast<uint8_t>((pos ? 3 : 0) | (neg ? 2 : 0));
  }
  for (int j = count; j < k2BitWord; ++j) codes[j] = 0;
  for (int b = 0; b < 4; ++b) {
    out[b] = static_cast<uint8_t>(codes[4 * b] << 6 | codes[4 * b + 1] << 4 |
                                  codes[4 * b + 2] << 2 | codes[4 * b + 3]);
  }
  std::memcpy(r, res, sizeof(float) * count);
}

inline void Quantize1BitWord(float t, const float* g, float* r, int count, uint8_t* out) {
  float grad[k1BitWord] = {};
  float res[k1BitWord] = {};
  std::memcpy(grad, g, sizeof(float) * count);
  std::memcpy(res, r, sizeof(float) * count);
  uint8_t bits[k1BitWord];
  for (int j = 0; j < k1BitWord; ++j) {
    const float v = res[j] + grad[j];
    const bool one = v > t;
    res[j] = one ? v - 1.0f : v + 1.0f;
    bits[j] = one ? 1 : 0;
  }
  for (int j = count; j < k1BitWord; ++j) bits[j] = 0;
  for (int b = 0; b < 4; ++b) {
    const uint8_t* p = bits + 8 * b;
    out[b] = static_cast<uint8_t>(p[0] << 7 | p[1] << 6 | p[2] << 5 | p[3] << 4 | p[4] << 3 |
                                  p[5] << 2 | p[6] << 1 | p[7]);
  }
  std::memcpy(r, res, sizeof(float) * count);
}

// Decode2BitWord writes the 16 values of one word into `values`.
inline void Decode2BitWord(float t, const uint8_t* in, float* values) {
  for (int j = 0; j < k2BitWord; ++j) {
    const int code = (in[j >> 2] >> (6 - 2 * (j & 3))) & 3;
    values[j] = code == 3 ? t : (code == 2 ? -t : 0.0f);
  }
}

inline void Decode1BitWord(const uint8_t* in, float* values) {
  for (int j = 0; j < k1BitWord; ++j) {
    values[j] = ((in[j >> 3] >> (7 - (j & 7))) & 1) ? 1.0f : -1.0f;
  }
}

// ForEachDecodedWord decodes word after word and hands each word's values to `fn(first, values,
// count)`.
template <typename Fn>
void ForEachDecodedWord(const CompressionParams& params, const uint8_t* in, int64_t n, Fn fn) {
  float values[k1BitWord];
  if (params.type == CompressionType::k2Bit) {
    for (int64_t first = 0; first < n; first += k2BitWord, in += 4) {
      Decode2BitWord(params.threshold, in, values);
      fn(first, values, static_cast<int>(std::min<int64_t>(k2BitWord, n - first)));
    }
  } else {
    for (int64_t first = 0; first < n; first += k1BitWord, in += 4) {
      Decode1BitWord(in, values);
      fn(first, values, static_cast<int>(std::min<int64_t>(k1BitWord, n - first)));
    }
  }
}

#if defined(__SSE2__)
// SSE2 kernels for whole words (x86-64 always has SSE2): four values per vector, the codes of
// four values form one 2-bit byte or one nibble of a 1-bit byte. They perform exactly the
// scalar operations above, in the same order, so the results are bit-identical.

// For a 4-bit mask of lanes (bit j = lane j), the byte with code `code` in the 2-bit fields of
// those lanes (lane 0 in the top bits).
struct CodeTables {
  uint8_t pos[16];
  uint8_t neg[16];
  uint8_t nibble[16];  // Lane j -> bit 3 - j: the 1-bit layout of four values.
  constexpr CodeTables() : pos(), neg(), nibble() {
    for (int m = 0; m < 16; ++m) {
      for (int j = 0; j < 4; ++j) {
        if (m & (1 << j)) {
          pos[m] = static_cast<uint8_t>(pos[m] | (3 << (6 - 2 * j)));
          neg[m] = static_cast<uint8_t>(neg[m] | (2 << (6 - 2 * j)));
          nibble[m] = static_cast<uint8_t>(nibble[m] | (1 << (3 - j)));
        }
      }
    }
  }
};
constexpr CodeTables kTables;

void Quantize2BitWords(float t, const float* g, float* r, int64_t words, uint8_t* out) {
  const __m128 pos_t = _mm_set1_ps(t);
  const __m128 neg_t = _mm_set1_ps(-t);
  for (int64_t i = 0; i < words * 4; ++i) {
    __m128 v = _mm_add_ps(_mm_loadu_ps(r + 4 * i), _mm_loadu_ps(g + 4 * i));
    const __m128 pos = _mm_cmpge_ps(v, pos_t);
    const __m128 neg = _mm_cmple_ps(v, neg_t);
    v = _mm_sub_ps(v, _mm_and_ps(pos, pos_t));
    v = _mm_add_ps(v, _mm_and_ps(neg, pos_t));
    _mm_storeu_ps(r + 4 * i, v);
    out[i] = kTables.pos[_mm_movemask_ps(pos)] | kTables.neg[_mm_movemask_ps(neg)];
  }
}

void Quantize1BitWords(float t, const float* g, float* r, int64_t words, uint8_t* out) {
  const __m128 threshold = _mm_set1_ps(t);
  const __m128 minus_one = _mm_set1_ps(-1.0f);
  const __m128 one = _mm_set1_ps(1.0f);
  for (int64_t i = 0; i < words * 4; ++i) {
    int nibbles[2];
    for (int h = 0; h < 2; ++h) {
      const int64_t e = 8 * i + 4 * h;
      const __m128 v = _mm_add_ps(_mm_loadu_ps(r + e), _mm_loadu_ps(g + e));
      const __m128 set = _mm_cmpgt_ps(v, threshold);
      const __m128 step = _mm_or_ps(_mm_and_ps(set, minus_one), _mm_andnot_ps(set, one));
      _mm_storeu_ps(r + e, _mm_add_ps(v, step));
      nibbles[h] = kTables.nibble[_mm_movemask_ps(set)];
    }
    out[i] = static_cast<uint8_t>(nibbles[0] << 4 | nibbles[1]);
  }
}

// Decode*Bytes calls fn(first_value, decoded_vector) for every four values of `words` words.
template <typename Fn>
void Decode2BitBytes(float t, const uint8_t* in, int64_t words, Fn fn) {
  const __m128i masks = _mm_set_epi32(0x03, 0x0c, 0x30, 0xc0);
  const __m128i neg_codes = _mm_set_epi32(0x02, 0x08, 0x20, 0x80);
  const __m128 pos_t = _mm_set1_ps(t);
  const __m128 neg_t = _mm_set1_ps(-t);
  for (int64_t i = 0; i < words * 4; ++i) {
    const __m128i fields = _mm_and_si128(_mm_set1_epi32(in[i]), masks);
    const __m128 pos = _mm_castsi128_ps(_mm_cmpeq_epi32(fields, masks));
    const __m128 neg = _mm_castsi128_ps(_mm_cmpeq_epi32(fields, neg_codes));
    fn(4 * i, _mm_or_ps(_mm_and_ps(pos, pos_t), _mm_and_ps(neg, neg_t)));
  }
}

template <typename Fn>
void Decode1BitBytes(const uint8_t* in, int64_t words, Fn fn) {
  const __m128i high = _mm_set_epi32(0x10, 0x20, 0x40, 0x80);
  const __m128i low = _mm_set_epi32(0x01, 0x02, 0x04, 0x08);
  const __m128 one = _mm_set1_ps(1.0f);
  const __m128 minus_one = _mm_set1_ps(-1.0f);
  for (int64_t i = 0; i < words * 4; ++i) {
    const __m128i byte = _mm_set1_epi32(in[i]);
    for (int h = 0; h < 2; ++h) {
      const __m128i bits = h == 0 ? high : low;
      const __m128 set = _mm_castsi128_ps(_mm_cmpeq_epi32(_mm_and_si128(byte, bits), bits));
      fn(8 * i + 4 * h, _mm_or_ps(_mm_and_ps(set, one), _mm_andnot_ps(set, minus_one)));
    }
  }
}
#endif  // __SSE2__

}  // namespace

std::string CompressionParams::ToString() const {
  if (type == CompressionType::kNone) return "none";
  return absl::StrCat(CompressionName(type), " threshold=", threshold);
}

absl::string_view CompressionName(CompressionType type) {
  switch (type) {
    case CompressionType::kNone:
      return "none";
    case CompressionType::k2Bit:
      return "2bit";
    case CompressionType::k1Bit:
      return "1bit";
  }
  return "unknown";
}

absl::StatusOr<CompressionParams> MakeCompressionParams(absl::string_view type,
                                                        std::optional<double> threshold) {
  CompressionParams params;
  params.threshold = kDefaultThreshold;
  if (type == "none") return params;
  if (type == "2bit") {
    params.type = CompressionType::k2Bit;
  } else if (type == "1bit") {
    params.type = CompressionType::k1Bit;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("gradient compression type \"", type,
                                                   "\" is not supported; use \"2bit\", \"1bit\" or "
                                                   "\"none\""));
  }
  if (threshold.has_value()) {
    if (!std::isfinite(*threshold) || std::fabs(*threshold) > 3.0e38) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient compression threshold ", *threshold, " is not a finite float"));
    }
    if (params.type == CompressionType::k2Bit && !(*threshold > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("2bit gradient compression needs a positive threshold, got ", *threshold));
    }
    params.threshold = static_cast<float>(*threshold);
  }
  return params;
}

absl::StatusOr<CompressionType> CompressionFromInt(int value) {
  if (value >= 0 && value <= 2) return static_cast<CompressionType>(value);
  return absl::InvalidArgumentError(absl::StrCat("unknown gradient compression type ", value));
}

int ValuesPerWord(CompressionType type) {
  switch (type) {
    case CompressionType::kNone:
      return 1;
    case CompressionType::k2Bit:
      return k2BitWord;
    case CompressionType::k1Bit:
      return k1BitWord;
  }
  return 1;
}

size_t CompressedBytes(CompressionType type, int64_t n) {
  if (n <= 0) return 0;
  const int per_word = ValuesPerWord(type);
  return 4 * static_cast<size_t>((n + per_word - 1) / per_word);
}

void Quantize(const CompressionParams& params, const float* grad, float* residual, int64_t n,
              uint8_t* out) {
  const float t = params.threshold;
#if defined(__SSE2__)
  // Whole words with vectors; the last, partial word below.
  const int64_t words = n / ValuesPerWord(params.type);
  const int64_t done = words * ValuesPerWord(params.type);
  if (params.type == CompressionType::k2Bit) {
    Quantize2BitWords(t, grad, residual, words, out);
  } else if (params.type == CompressionType::k1Bit) {
    Quantize1BitWords(t, grad, residual, words, out);
  }
  grad += done;
  residual += done;
  n -= done;
  out += 4 * words;
#endif
  if (params.type == CompressionType::k2Bit) {
    for (int64_t first = 0; first < n; first += k2BitWord, out += 4) {
      Quantize2BitWord(t, grad + first, residual + first,
                       static_cast<int>(std::min<int64_t>(k2BitWord, n - first)), out);
    }
  } else if (params.type == CompressionType::k1Bit) {
    for (int64_t first = 0; first < n; first += k1BitWord, out += 4) {
      Quantize1BitWord(t, grad + first, residual + first,
                       static_cast<int>(std::min<int64_t>(k1BitWord, n - first)), out);
    }
  }
}

namespace {

// VectorWords decodes the whole words of `in` with vectors where available, calling
// fn(first_value, vector of 4 values), and returns how many values it covered.
template <typename Fn>
int64_t VectorWords(const CompressionParams& params, const uint8_t* in, int64_t n, Fn fn) {
#if defined(__SSE2__)
  const int64_t words = n / ValuesPerWord(params.type);
  if (params.type == CompressionType::k2Bit) {
    Decode2BitBytes(params.threshold, in, words, fn);
  } else {
    Decode1BitBytes(in, words, fn);
  }
  return words * ValuesPerWord(params.type);
#else
  (void)params, (void)in, (void)n, (void)fn;
  return 0;
#endif
}

}  // namespace

void Dequantize(const CompressionParams& params, const uint8_t* in, int64_t n, float* out) {
#if defined(__SSE2__)
  const int64_t done = VectorWords(
      params, in, n, [out](int64_t first, __m128 values) { _mm_storeu_ps(out + first, values); });
#else
  const int64_t done = 0;
#endif
  const uint8_t* rest = in + 4 * (done / ValuesPerWord(params.type));
  ForEachDecodedWord(params, rest, n - done,
                     [out = out + done](int64_t first, const float* values, int count) {
                       std::memcpy(out + first, values, sizeof(float) * count);
                     });
}

void DequantizeAdd(const CompressionParams& params, const uint8_t* in, int64_t n, float* out) {
#if defined(__SSE2__)
  const int64_t done = VectorWords(params, in, n, [out](int64_t first, __m128 values) {
    _mm_storeu_ps(out + first, _mm_add_ps(_mm_loadu_ps(out + first), values));
  });
#else
  const int64_t done = 0;
#endif
  const uint8_t* rest = in + 4 * (done / ValuesPerWord(params.type));
  ForEachDecodedWord(params, rest, n - done,
                     [out = out + done](int64_t first, const float* values, int count) {
                       float* o = out + first;
                       for (int j = 0; j < count; ++j) o[j] += values[j];
                     });
}

}  // namespace kvstore
