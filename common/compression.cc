#include "common/compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

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

}  // namespace

std::string CompressionParams::ToString() const {
  if (type == CompressionType::kNone) return "none";
  return absl::StrCat(CompressionName(type), " threshold=", threshold);
}

absl::string_view CompressionName(CompressionType type) {
  switch (type) {
    case CompressionType::kNone: return "none";
    case CompressionType::k2Bit: return "2bit";
    case CompressionType::k1Bit: return "1bit";
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
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient compression type \"", type, "\" is not supported; use \"2bit\", \"1bit\" or "
        "\"none\""));
  }
  if (threshold.has_value()) {
    if (!std::isfinite(*threshold) || std::fabs(*threshold) > 3.0e38) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient compression threshold ", *threshold, " is not a finite float"));
    }
    if (params.type == CompressionType::k2Bit && !(*threshold > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "2bit gradient compression needs a positive threshold, got ", *threshold));
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
    case CompressionType::kNone: return 1;
    case CompressionType::k2Bit: return k2BitWord;
    case CompressionType::k1Bit: return k1BitWord;
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

void Dequantize(const CompressionParams& params, const uint8_t* in, int64_t n, float* out) {
  ForEachDecodedWord(params, in, n, [out](int64_t first, const float* values, int count) {
    std::memcpy(out + first, values, sizeof(float) * count);
  });
}

void DequantizeAdd(const CompressionParams& params, const uint8_t* in, int64_t n, float* out) {
  ForEachDecodedWord(params, in, n, [out](int64_t first, const float* values, int count) {
    float* o = out + first;
    for (int j = 0; j < count; ++j) o[j] += values[j];
  });
}

}  // namespace kvstore
