#include "engine/copy/dtype_convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace ckptdb::engine {
namespace {

// A binary floating-point format of 1 sign bit, `ebits` exponent bits and
// `mbits` mantissa bits. `has_inf`: IEEE-like (all-ones exponent is inf/NaN);
// otherwise (the "fn" formats) only the all-ones code is NaN and the rest of
// the top exponent holds finite values.
struct Minifloat {
  int ebits;
  int mbits;
  bool has_inf;

  uint32_t bias() const { return (1u << (ebits - 1)) - 1; }
  uint32_t sign_bit() const { return 1u << (ebits + mbits); }
};

uint32_t MaxFinite(const Minifloat& f) {
  const uint32_t all =
      (1u << (f.ebits + f.mbits)) - 1;  // magnitude bits all ones
  if (!f.has_inf) return all - 1;       // all ones is NaN
  return all - (1u << f.mbits);         // exponent all ones is inf/NaN
}

uint32_t Encode(double v, const Minifloat& f) {
  const uint32_t sign = std::signbit(v) ? f.sign_bit() : 0;
  const uint32_t all = (1u << (f.ebits + f.mbits)) - 1;
  // With infinities, the quiet NaN: the exponent all ones and the top bit of
  // the mantissa (bfloat16 0x7fc0, as torch and IEEE hardware give); without
  // (e4m3fn), the one NaN code.
  const uint32_t exponent_ones = all & ~((1u << f.mbits) - 1);
  const uint32_t nan = f.has_inf ? exponent_ones | (1u << (f.mbits - 1)) : all;
  if (std::isnan(v)) return sign | nan;
  const double a = std::fabs(v);
  if (std::isinf(a)) return sign | (f.has_inf ? MaxFinite(f) + 1 : nan);
  if (a == 0) return sign;
  int exp = 0;
  std::frexp(a, &exp);  // a = m * 2^exp, m in [0.5, 1): a = 1.x * 2^(exp - 1)
  const int min_normal_exp = 1 - static_cast<int>(f.bias());
  const int e = std::max(exp - 1, min_normal_exp);
  // Quantize to the spacing of the binade (or of the subnormals), rounding half
  // to even.
  const double q = std::nearbyint(std::ldexp(a, f.mbits - e));
  double code;
  if (exp - 1 < min_normal_exp) {
    code =
        q;  // subnormal; q == 2^mbits rolls over into the smallest normal code
  } else {
    code = std::ldexp(static_cast<double>(e + static_cast<int>(f.bias())),
                      f.mbits) +
           (q - std::ldexp(1.0, f.mbits));
  }
  if (code > MaxFinite(f)) return sign | (f.has_inf ? MaxFinite(f) + 1 : nan);
  return sign | static_cast<uint32_t>(code);
}

double Decode(uint32_t bits, const Minifloat& f) {
  const bool negative = bits & f.sign_bit();
  const uint32_t mag = bits & (f.sign_bit() - 1);
  const uint32_t exp = mag >> f.mbits;
  const uint32_t mant = mag & ((1u << f.mbits) - 1);
  const uint32_t max_exp = (1u << f.ebits) - 1;
  double v;
  if (f.has_inf && exp == max_exp) {
    v = mant == 0 ? std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  } else if (!f.has_inf && mag == (1u << (f.ebits + f.mbits)) - 1) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant),
                   1 - static_cast<int>(f.bias()) - f.mbits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -f.mbits),
                   static_cast<int>(exp) - static_cast<int>(f.bias()));
  }
  return negative ? -v : v;
}

constexpr Minifloat kHalf{5, 10, true};
constexpr Minifloat kBFloat16{8, 7, true};
constexpr Minifloat kE4M3FN{4, 3, false};
constexpr Minifloat kE5M2{5, 2, true};

bool IsFloat(DType t) {
  return t == DType::kFloat64 || t == DType::kFloat32 || t == DType::kFloat16 ||
         t == DType::kBFloat16 || t == DType::kFloat8E4M3FN ||
         t == DType::kFloat8E5M2;
}

double LoadFloat(const uint8_t* p, DType t) {
  switch (t) {
    case DType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return HalfToFloat(v);
    }
    case DType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return BFloat16ToFloat(v);
    }
    case DType::kFloat8E4M3FN:
      return E4M3FNToFloat(*p);
    case DType::kFloat8E5M2:
      return E5M2ToFloat(*p);
    default:
      return 0;
  }
}

int64_t LoadInt(const uint8_t* p, DType t) {
  switch (t) {
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kInt16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case DType::kInt8:
      return static_cast<int8_t>(*p);
    case DType::kUInt8:
      return *p;
    case DType::kUInt32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kUInt64: {  // its bits: to another integer type, a C cast
      uint64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<int64_t>(v);
    }
    case DType::kBool:
      return *p != 0;
    default:
      return 0;
  }
}

template <typename T>
void StoreAs(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// Float to integer: truncation toward zero, saturated to the target's range,
// NaN -> 0.
template <typename T>
T Saturate(double v) {
  if (std::isnan(v)) return 0;
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (v <= lo) return std::numeric_limits<T>::min();
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

void StoreFloat(uint8_t* p, DType t, double v) {
  switch (t) {
    case DType::kFloat64:
      StoreAs(p, v);
      break;
    case DType::kFloat32:
      StoreAs(p, static_cast<float>(v));
      break;
    case DType::kFloat16:
      StoreAs(p, FloatToHalf(v));
      break;
    case DType::kBFloat16:
      StoreAs(p, FloatToBFloat16(v));
      break;
    case DType::kFloat8E4M3FN:
      *p = FloatToE4M3FN(v);
      break;
    case DType::kFloat8E5M2:
      *p = FloatToE5M2(v);
      break;
    case DType::kInt64:
      StoreAs(p, Saturate<int64_t>(v));
      break;
    case DType::kInt32:
      StoreAs(p, Saturate<int32_t>(v));
      break;
    case DType::kInt16:
      StoreAs(p, Saturate<int16_t>(v));
      break;
    case DType::kInt8:
      StoreAs(p, Saturate<int8_t>(v));
      break;
    case DType::kUInt8:
      StoreAs(p, Saturate<uint8_t>(v));
      break;
    case DType::kUInt32:
      StoreAs(p, Saturate<uint32_t>(v));
      break;
    case DType::kUInt64:
      StoreAs(p, Saturate<uint64_t>(v));
      break;
    case DType::kBool:
      *p = v != 0;
      break;
  }
}

// Integer to integer wraps like a C cast (numpy's astype); to float rounds.
void StoreInt(uint8_t* p, DType t, int64_t v) {
  switch (t) {
    case DType::kInt64:
      StoreAs(p, v);
      break;
    case DType::kInt32:
      StoreAs(p, static_cast<int32_t>(v));
      break;
    case DType::kInt16:
      StoreAs(p, static_cast<int16_t>(v));
      break;
    case DType::kInt8:
      StoreAs(p, static_cast<int8_t>(v));
      break;
    case DType::kUInt8:
      StoreAs(p, static_cast<uint8_t>(v));
      break;
    case DType::kUInt32:
      StoreAs(p, static_cast<uint32_t>(v));
      break;
    case DType::kUInt64:
      StoreAs(p, static_cast<uint64_t>(v));
      break;
    case DType::kBool:
      *p = v != 0;
      break;
    default:
      StoreFloat(p, t, static_cast<double>(v));
      break;
  }
}

}  // namespace

uint16_t FloatToHalf(double v) {
  return static_cast<uint16_t>(Encode(v, kHalf));
}
double HalfToFloat(uint16_t h) { return Decode(h, kHalf); }
uint16_t FloatToBFloat16(double v) {
  return static_cast<uint16_t>(Encode(v, kBFloat16));
}
double BFloat16ToFloat(uint16_t h) { return Decode(h, kBFloat16); }
uint8_t FloatToE4M3FN(double v) {
  return static_cast<uint8_t>(Encode(v, kE4M3FN));
}
double E4M3FNToFloat(uint8_t v) { return Decode(v, kE4M3FN); }
uint8_t FloatToE5M2(double v) { return static_cast<uint8_t>(Encode(v, kE5M2)); }
double E5M2ToFloat(uint8_t v) { return Decode(v, kE5M2); }

void ConvertElements(const void* src, DType from, void* dst, DType to,
                     size_t n) {
  const size_t in = DTypeSize(from), out = DTypeSize(to);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (from == to) {
    std::memcpy(d, s, n * in);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    if (IsFloat(from)) {
      StoreFloat(d + i * out, to, LoadFloat(s + i * in, from));
    } else if (from == DType::kUInt64 && IsFloat(to)) {
      // Its value, not its bits read as int64_t (above 2^63 - 1).
      uint64_t v;
      std::memcpy(&v, s + i * in, 8);
      StoreFloat(d + i * out, to, static_cast<double>(v));
    } else {
      StoreInt(d + i * out, to, LoadInt(s + i * in, from));
    }
  }
}

}  // namespace ckptdb::engine
