#pragma once
// memcpy for tensor data. An empty tensor may have no buffer at all (TensorFlow hands
// nullptr for zero elements, an empty std::vector's data() may be nullptr), and memcpy
// with a null pointer is undefined even for zero bytes: UBSan stops there
// (scripts/sanitize_suite.sh found it in reducescatter of a rank's empty share).
#include <cstddef>
#include <cstring>

namespace horo {

inline void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

}  // namespace horo
