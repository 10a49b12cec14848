#include "reduce/reduce_kernels.h"

#include <cmath>
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

template <typename T, typename Op>
void reduce_native(void* dst_v, const void* src_v, size_t n) {
  T* __restrict dst = static_cast<T*>(dst_v);
  const T* __restrict src = static_cast<const T*>(src_v);
  for (size_t i = 0; i < n; ++i) dst[i] = Op::apply(dst[i], src[i]);
}

// 16-bit floats: widen, reduce, round once.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), typename Op>
void reduce_half(void* dst_v, const void* src_v, size_t n) {
  uint16_t* __restrict dst = static_cast<uint16_t*>(dst_v);
  const uint16_t* __restrict src = static_cast<const uint16_t*>(src_v);
  for (size_t i = 0; i < n; ++i) dst[i] = Narrow(Op::apply(Widen(dst[i]), Widen(src[i])));
}

template <typename Op>
void reduce_typed(DataType dtype, void* dst, const void* src, size_t n) {
  switch (dtype) {
    case DataType::kUInt8: return reduce_native<uint8_t, Op>(dst, src, n);
    case DataType::kInt8: return reduce_native<int8_t, Op>(dst, src, n);
    case DataType::kInt32: return reduce_native<int32_t, Op>(dst, src, n);
    case DataType::kInt64: return reduce_native<int64_t, Op>(dst, src, n);
    case DataType::kFloat32: return reduce_native<float, Op>(dst, src, n);
    case DataType::kFloat64: return reduce_native<double, Op>(dst, src, n);
    case DataType::kFloat16: return reduce_half<half_to_float, float_to_half, Op>(dst, src, n);
    case DataType::kBFloat16: return reduce_half<bfloat16_to_float, float_to_bfloat16, Op>(dst, src, n);
  }
}

template <typename T>
inline T scale_one(T x, double factor) {
  if constexpr (std::is_same_v<T, float>) {
    return x * static_cast<float>(factor);
  } else if constexpr (std::is_same_v<T, double>) {
    return x * factor;
  } else {
    return static_cast<T>(std::nearbyint(static_cast<double>(x) * factor));
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

}  // namespace

void reduce_into(DataType dtype, ReduceOp op, void* dst, const void* src, size_t count) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum: return reduce_typed<Sum>(dtype, dst, src, count);
    case ReduceOp::kProduct: return reduce_typed<Product>(dtype, dst, src, count);
    case ReduceOp::kMin: return reduce_typed<Min>(dtype, dst, src, count);
    case ReduceOp::kMax: return reduce_typed<Max>(dtype, dst, src, count);
    case ReduceOp::kAdasum: break;
  }
  throw Error(std::string("reduction op ") + op_name(op) + " is not supported");
}

void copy_scaled(DataType dtype, void* dst, const void* src, size_t count, double factor) {
  if (factor == 1.0) {
    if (dst != src) std::memcpy(dst, src, count * dtype_size(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kUInt8: return copy_scaled_native<uint8_t>(dst, src, count, factor);
    case DataType::kInt8: return copy_scaled_native<int8_t>(dst, src, count, factor);
    case DataType::kInt32: return copy_scaled_native<int32_t>(dst, src, count, factor);
    case DataType::kInt64: return copy_scaled_native<int64_t>(dst, src, count, factor);
    case DataType::kFloat32: return copy_scaled_native<float>(dst, src, count, factor);
    case DataType::kFloat64: return copy_scaled_native<double>(dst, src, count, factor);
    case DataType::kFloat16: return copy_scaled_half<half_to_float, float_to_half>(dst, src, count, factor);
    case DataType::kBFloat16:
      return copy_scaled_half<bfloat16_to_float, float_to_bfloat16>(dst, src, count, factor);
  }
}

void scale_buffer(DataType dtype, void* buf, size_t count, double factor) {
  if (factor == 1.0) return;
  // In place is safe: each element is read before it is written.
  copy_scaled(dtype, buf, buf, count, factor);
}

}  // namespace horo
