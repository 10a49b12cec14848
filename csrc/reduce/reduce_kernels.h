// Element-wise reductions and scaling, one entry point per job, dispatched on
// dtype and op. The inner loops are plain __restrict loops the compiler
// vectorises; integer arithmetic wraps like NumPy's.
#pragma once

#include <cstddef>

#include "common/types.h"

namespace horo {

// dst[i] = dst[i] (op) src[i]. Average reduces as Sum (the engine scales after).
void reduce_into(DataType dtype, ReduceOp op, void* dst, const void* src, size_t count);

// out[i] = a[i] (op) b[i], for buffers that do not overlap: lets an
// out-of-place collective combine its input with what arrives without first
// copying the input.
void reduce_to(DataType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t count);

// out[i] = own[i] (op) other[i], where `out` may be `own` itself (in place), which reduce_to's
// buffers may not be.
inline void reduce_own_with(DataType dtype, ReduceOp op, void* out, const void* own, const void* other, size_t count) {
  if (out == own) {
    reduce_into(dtype, op, out, other, count);
  } else {
    reduce_to(dtype, op, out, own, other, count);
  }
}

// buf[i] *= factor. Floats scale in their own precision (16-bit floats via float32), except that
// a float32 times 1/n (Average's factor) is divided by n, correctly rounded; integers scale in
// float64 and are cast back (truncated toward zero).
void scale_buffer(DataType dtype, void* buf, size_t count, double factor);

// buf[i] = the identity of `op` (0 for sum, 1 for product, the largest value
// for min, the smallest for max): what a rank that has joined contributes.
void fill_identity(DataType dtype, ReduceOp op, void* buf, size_t count);

// dst[i] = src[i] * factor (copy and scale in one pass).
void copy_scaled(DataType dtype, void* dst, const void* src, size_t count, double factor);

}  // namespace horo
