#pragma once
// Copies into memory another core reads next (a shared-memory slot) with
// non-temporal stores: the destination lines are written without first being
// fetched for ownership from the core that read them last, which on some VMs
// makes a plain memcpy into a slot several times slower. They go to memory, so
// they lose to a plain copy that stays in cache: store_probe.h decides.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/copy_bytes.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace horo {

inline void stream_bytes(void* dst, const void* src, std::size_t bytes) {
#if defined(__x86_64__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  // Up to the destination's next cache line as usual, then whole lines (SSE2: every x86-64).
  const std::size_t head = std::min(bytes, (64 - reinterpret_cast<std::uintptr_t>(d) % 64) % 64);
  copy_bytes(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 64; d += 64, s += 64, bytes -= 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  copy_bytes(d, s, bytes);
  // Non-temporal stores are weakly ordered: visible before the step that publishes them.
  _mm_sfence();
#else
  copy_bytes(dst, src, bytes);
#endif
}

}  // namespace horo
