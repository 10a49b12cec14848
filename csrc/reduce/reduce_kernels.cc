#include "reduce/reduce_kernels.h"
#include "common/copy_bytes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/error.h"
#include "reduce/half.h"

namespace horo {
namespace {

// Wrapping integer arithmetic without signed-overflow UB.
template <typename T>
inline T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <typename T>
inline T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

struct Sum {
  template <typename T>
  static T apply(T a, T b) { return wrap_add(a, b); }
};
struct Product {
  template <typename T>
  static T apply(T a, T b) { return wrap_mul(a, b); }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) { return b < a ? b : a; }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) { return a < b ? b : a; }
};

// dst = dst op src when out == a; out = a op b for disjoint buffers. Two
// instantiations keep __restrict honest and both loops vectorised.
template <typename T, typename Op, bool InPlace>
void reduce_native(void* out_v, const void* a_v, const void* b_v, size_t n) {
  const T* __restrict b = static_cast<const T*>(b_v);
  if constexpr (InPlace) {
    T* __restrict dst = static_cast<T*>(out_v);
    for (size_t i = 0; i < n; ++i) dst[i] = Op::apply(dst[i], b[i]);
  } else {
    T* __restrict out = static_cast<T*>(out_v);
    const T* __restrict a = static_cast<const T*>(a_v);
    for (size_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
  }
}

// 16-bit floats: widen, reduce, round once.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), typename Op, bool InPlace>
void reduce_half(void* out_v, const void* a_v, const void* b_v, size_t n) {
  uint16_t* out = static_cast<uint16_t*>(out_v);
  const uint16_t* a = static_cast<const uint16_t*>(a_v);
  const uint16_t* __restrict b = static_cast<const uint16_t*>(b_v);
  for (size_t i = 0; i < n; ++i) out[i] = Narrow(Op::apply(Widen(a[i]), Widen(b[i])));
}

template <typename Op, bool InPlace>
void reduce_typed(DataType dtype, void* out, const void* a, const void* b, size_t n) {
  switch (dtype) {
    case DataType::kUInt8: return reduce_native<uint8_t, Op, InPlace>(out, a, b, n);
    case DataType::kInt8: return reduce_native<int8_t, Op, InPlace>(out, a, b, n);
    case DataType::kInt32: return reduce_native<int32_t, Op, InPlace>(out, a, b, n);
    case DataType::kInt64: return reduce_native<int64_t, Op, InPlace>(out, a, b, n);
    case DataType::kInt16: return reduce_native<int16_t, Op, InPlace>(out, a, b, n);
    case DataType::kBool: break;  // refused at enqueue (dtype_reducible)
    case DataType::kFloat32: return reduce_native<float, Op, InPlace>(out, a, b, n);
    case DataType::kFloat64: return reduce_native<double, Op, InPlace>(out, a, b, n);
    case DataType::kFloat16: return reduce_half<half_to_float, float_to_half, Op, InPlace>(out, a, b, n);
    case DataType::kBFloat16: return reduce_half<bfloat16_to_float, float_to_bfloat16, Op, InPlace>(out, a, b, n);
  }
}

template <bool InPlace>
void reduce_dispatch(DataType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum: return reduce_typed<Sum, InPlace>(dtype, out, a, b, n);
    case ReduceOp::kProduct: return reduce_typed<Product, InPlace>(dtype, out, a, b, n);
    case ReduceOp::kMin: return reduce_typed<Min, InPlace>(dtype, out, a, b, n);
    case ReduceOp::kMax: return reduce_typed<Max, InPlace>(dtype, out, a, b, n);
    case ReduceOp::kAdasum: break;
  }
  throw Error(std::string("reduction op ") + op_name(op) + " is not supported");
}

template <typename T>
inline T scale_one(T x, double factor) {
  if constexpr (std::is_same_v<T, float>) {
    return x * static_cast<float>(factor);
  } else if constexpr (std::is_same_v<T, double>) {
    return x * factor;
  } else {
    // Integers scale in float64 and are cast back (truncated toward zero), as Horovod does.
    return static_cast<T>(static_cast<double>(x) * factor);
  }
}

template <typename T>
void copy_scaled_native(void* dst_v, const void* src_v, size_t n, double factor) {
  // No __restrict: scale_buffer calls this with dst == src.
  T* dst = static_cast<T*>(dst_v);
  const T* src = static_cast<const T*>(src_v);
  for (size_t i = 0; i < n; ++i) dst[i] = scale_one(src[i], factor);
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void copy_scaled_half(void* dst_v, const void* src_v, size_t n, double factor) {
  uint16_t* dst = static_cast<uint16_t*>(dst_v);
  const uint16_t* src = static_cast<const uint16_t*>(src_v);
  const float f = static_cast<float>(factor);
  for (size_t i = 0; i < n; ++i) dst[i] = Narrow(Widen(src[i]) * f);
}

// Average's 1/n as a float32 divisor n, or 0 where `factor` is no such reciprocal (a power of two
// multiplies exactly, and a caller's own factor multiplies as in Horovod).
float average_divisor(double factor) {
  if (!(factor > 0 && factor < 0.5)) return 0;
  const double n = std::nearbyint(1.0 / factor);
  if (n > double(1 << 24) || 1.0 / n != factor || std::exp2(std::ilogb(n)) == n) return 0;
  return static_cast<float>(n);
}

// x / n correctly rounded, from a product and one correction (Markstein): the residual x - q*n is
// exact in an FMA, and q + residual/n rounds right (checked against division on 1.1e9 random floats
// and n = 3..1100; a subnormal quotient may differ in its last bit). As fast as the product, where
// a division takes 2-4x the time.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("fma"))) void divide_fma(float* dst, const float* src, size_t count, float n) {
  const float r = 1.0f / n;
  for (size_t i = 0; i < count; ++i) {
    const float q = src[i] * r, e = std::fma(-q, n, src[i]);
    dst[i] = (e != 0 && e == e) ? std::fma(e, r, q) : q;  // exact (keeps -0), or x infinite / NaN
  }
}
#endif

void divide_float32(void* dst_v, const void* src_v, size_t count, float n) {
  float* dst = static_cast<float*>(dst_v);
  const float* src = static_cast<const float*>(src_v);
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool fma = __builtin_cpu_supports("fma");
  if (fma) return divide_fma(dst, src, count, n);
#endif
  for (size_t i = 0; i < count; ++i) dst[i] = src[i] / n;
}

}  // namespace

void reduce_into(DataType dtype, ReduceOp op, void* dst, const void* src, size_t count) {
  reduce_dispatch<true>(dtype, op, dst, dst, src, count);
}

void reduce_to(DataType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t count) {
  reduce_dispatch<false>(dtype, op, out, a, b, count);
}

void copy_scaled(DataType dtype, void* dst, const void* src, size_t count, double factor) {
  if (factor == 1.0) {
    if (dst != src) copy_bytes(dst, src, count * dtype_size(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kUInt8: return copy_scaled_native<uint8_t>(dst, src, count, factor);
    case DataType::kInt8: return copy_scaled_native<int8_t>(dst, src, count, factor);
    case DataType::kInt32: return copy_scaled_native<int32_t>(dst, src, count, factor);
    case DataType::kInt64: return copy_scaled_native<int64_t>(dst, src, count, factor);
    case DataType::kInt16: return copy_scaled_native<int16_t>(dst, src, count, factor);
    case DataType::kBool: break;  // never reduced, so never scaled
    case DataType::kFloat32:
      // Average divides, correctly rounded, as torch's DDP and TensorFlow do: sum / n, not sum * fl(1/n).
      if (const float n = average_divisor(factor)) return divide_float32(dst, src, count, n);
      return copy_scaled_native<float>(dst, src, count, factor);
    case DataType::kFloat64: return copy_scaled_native<double>(dst, src, count, factor);
    case DataType::kFloat16: return copy_scaled_half<half_to_float, float_to_half>(dst, src, count, factor);
    case DataType::kBFloat16:
      return copy_scaled_half<bfloat16_to_float, float_to_bfloat16>(dst, src, count, factor);
  }
}

namespace {

template <typename T>
void fill_identity_typed(ReduceOp op, void* buf, size_t count) {
  T value = 0;
  if (op == ReduceOp::kProduct) value = 1;
  if (op == ReduceOp::kMin) value = std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                                         : std::numeric_limits<T>::max();
  if (op == ReduceOp::kMax) value = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                                         : std::numeric_limits<T>::lowest();
  std::fill_n(static_cast<T*>(buf), count, value);
}

template <uint16_t (*Narrow)(float)>
void fill_identity_half(ReduceOp op, void* buf, size_t count) {
  float value = 0.0f;
  if (op == ReduceOp::kProduct) value = 1.0f;
  if (op == ReduceOp::kMin) value = std::numeric_limits<float>::infinity();
  if (op == ReduceOp::kMax) value = -std::numeric_limits<float>::infinity();
  std::fill_n(static_cast<uint16_t*>(buf), count, Narrow(value));
}

}  // namespace

void fill_identity(DataType dtype, ReduceOp op, void* buf, size_t count) {
  switch (dtype) {
    case DataType::kUInt8: return fill_identity_typed<uint8_t>(op, buf, count);
    case DataType::kInt8: return fill_identity_typed<int8_t>(op, buf, count);
    case DataType::kInt32: return fill_identity_typed<int32_t>(op, buf, count);
    case DataType::kInt64: return fill_identity_typed<int64_t>(op, buf, count);
    case DataType::kInt16: return fill_identity_typed<int16_t>(op, buf, count);
    case DataType::kBool: return fill_identity_typed<uint8_t>(op, buf, count);
    case DataType::kFloat32: return fill_identity_typed<float>(op, buf, count);
    case DataType::kFloat64: return fill_identity_typed<double>(op, buf, count);
    case DataType::kFloat16: return fill_identity_half<float_to_half>(op, buf, count);
    case DataType::kBFloat16: return fill_identity_half<float_to_bfloat16>(op, buf, count);
  }
}

void scale_buffer(DataType dtype, void* buf, size_t count, double factor) {
  if (factor == 1.0) return;
  // In place is safe: each element is read before it is written.
  copy_scaled(dtype, buf, buf, count, factor);
}

}  // namespace horo
