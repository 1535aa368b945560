#include "client/gpu/cuda_reduce_check.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "client/gpu/cuda_reduce.h"

namespace kvstore::gpu {
namespace {

using cuda::Buffer;
using cuda::ElementType;

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      int e = -1;
      uint32_t m = mant;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400) == 0);
      bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

double Get(ElementType type, const std::vector<uint8_t>& bytes, int64_t i) {
  switch (type) {
    case ElementType::kFloat32: {
      float v;
      std::memcpy(&v, &bytes[i * 4], 4);
      return v;
    }
    case ElementType::kFloat64: {
      double v;
      std::memcpy(&v, &bytes[i * 8], 8);
      return v;
    }
    case ElementType::kInt32: {
      int32_t v;
      std::memcpy(&v, &bytes[i * 4], 4);
      return v;
    }
    case ElementType::kInt64: {
      int64_t v;
      std::memcpy(&v, &bytes[i * 8], 8);
      return static_cast<double>(v);
    }
    case ElementType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, &bytes[i * 2], 2);
      return HalfToFloat(v);
    }
    case ElementType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, &bytes[i * 2], 2);
      const uint32_t bits = static_cast<uint32_t>(v) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
  }
  return 0;
}

size_t Size(ElementType type) {
  return type == ElementType::kFloat16 || type == ElementType::kBFloat16 ? 2
         : type == ElementType::kFloat32 || type == ElementType::kInt32  ? 4
                                                                         : 8;
}

// Random values exactly representable in the type: multiples of 1/8 in [-4, 4) for floats
// (never all equal), integers in [-1000, 1000].
void Fill(ElementType type, std::mt19937_64& rng, std::vector<uint8_t>* bytes, int64_t n) {
  std::uniform_int_distribution<int> eighth(-32, 31), integer(-1000, 1000);
  bytes->resize(n * Size(type));
  for (int64_t i = 0; i < n; ++i) {
    const double v = eighth(rng) / 8.0;
    switch (type) {
      case ElementType::kFloat32: {
        float f = static_cast<float>(v);
        std::memcpy(&(*bytes)[i * 4], &f, 4);
        break;
      }
      case ElementType::kFloat64:
        std::memcpy(&(*bytes)[i * 8], &v, 8);
        break;
      case ElementType::kInt32: {
        int32_t x = integer(rng);
        std::memcpy(&(*bytes)[i * 4], &x, 4);
        break;
      }
      case ElementType::kInt64: {
        int64_t x = integer(rng);
        std::memcpy(&(*bytes)[i * 8], &x, 8);
        break;
      }
      case ElementType::kFloat16: {
        // v * 8 is an integer in [-32, 31]: exact in float16 as sign, exponent and mantissa.
        float f = static_cast<float>(v);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        const uint32_t sign = (bits >> 16) & 0x8000u;
        const int exp = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
        const uint16_t h =
            f == 0 ? 0 : static_cast<uint16_t>(sign | (exp << 10) | ((bits >> 13) & 0x3ff));
        std::memcpy(&(*bytes)[i * 2], &h, 2);
        break;
      }
      case ElementType::kBFloat16: {
        float f = static_cast<float>(v);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        const uint16_t b = static_cast<uint16_t>(bits >> 16);
        std::memcpy(&(*bytes)[i * 2], &b, 2);
        break;
      }
    }
  }
}

}  // namespace

int CheckSums(uint64_t seed, int devices) {
  std::mt19937_64 rng(seed);
  int checks = 0, failures = 0;
  const ElementType types[] = {ElementType::kFloat32, ElementType::kFloat16, ElementType::kBFloat16,
                               ElementType::kFloat64, ElementType::kInt32,   ElementType::kInt64};
  for (ElementType type : types) {
    for (int k = 1; k <= 9; ++k) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4099}, int64_t{1000003}}) {
        for (int offset : {0, 1}) {
          const size_t size = Size(type);
          std::vector<std::vector<uint8_t>> host(k);
          std::vector<void*> allocations(k + 1, nullptr);
          std::vector<Buffer> inputs(k);
          std::vector<double> reference(n, 0.0);
          const int out_device = static_cast<int>(rng() % devices);
          for (int j = 0; j < k; ++j) {
            Fill(type, rng, &host[j], n);
            for (int64_t i = 0; i < n; ++i) reference[i] += Get(type, host[j], i);
            const int device = (out_device + j) % devices;
            std::string e = cuda::Alloc(device, (n + 1) * size, &allocations[j]);
            void* data = static_cast<uint8_t*>(allocations[j]) + offset * size;
            if (e.empty()) e = cuda::CopyToDevice(device, data, host[j].data(), n * size);
            if (!e.empty()) {
              std::printf("FAIL setup: %s\n", e.c_str());
              return -1;
            }
            inputs[j] = Buffer{data, device};
          }
          std::string e = cuda::Alloc(out_device, (n + 1) * size, &allocations[k]);
          void* out = static_cast<uint8_t*>(allocations[k]) + offset * size;
          std::vector<uint8_t> poison(n * size, 0x7f);
          if (e.empty()) e = cuda::CopyToDevice(out_device, out, poison.data(), n * size);
          if (e.empty()) e = cuda::Sum(inputs.data(), k, Buffer{out, out_device}, type, n);
          std::vector<uint8_t> got(n * size);
          if (e.empty()) e = cuda::CopyToHost(out_device, got.data(), out, n * size);
          ++checks;
          if (!e.empty()) {
            std::printf("FAIL type %d k %d n %lld offset %d: %s\n", static_cast<int>(type), k,
                        static_cast<long long>(n), offset, e.c_str());
            ++failures;
          } else {
            // Sums of multiples of 1/8 bounded by 4k: exact in float32 and float64; float16
            // and bfloat16 round the float32 sum once.
            const bool half = type == ElementType::kFloat16 || type == ElementType::kBFloat16;
            for (int64_t i = 0; i < n; ++i) {
              const double tolerance =
                  half ? std::abs(reference[i]) *
                             (type == ElementType::kFloat16 ? 1.0 / 1024 : 1.0 / 128)
                       : 0;
              if (std::abs(Get(type, got, i) - reference[i]) > tolerance) {
                std::printf("FAIL type %d k %d n %lld offset %d: element %lld is %g, expected %g\n",
                            static_cast<int>(type), k, static_cast<long long>(n), offset,
                            static_cast<long long>(i), Get(type, got, i), reference[i]);
                ++failures;
                break;
              }
            }
          }
          for (int j = 0; j <= k; ++j) {
            if (allocations[j] != nullptr) {
              cuda::Free(j < k ? inputs[j].device : out_device, allocations[j]);
            }
          }
        }
      }
    }
  }
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures;
}

}  // namespace kvstore::gpu
