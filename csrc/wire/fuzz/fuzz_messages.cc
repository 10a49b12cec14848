// Fuzz target for every decoder of control messages (requests gathered at the
// coordinator, responses broadcast back). An input must either decode or throw
// horo::Error; anything else (a crash, an out-of-bounds read, a huge
// allocation) is a bug. What decodes must re-encode to the very same bytes:
// the encoding is canonical, so a difference means a field was misread.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "wire/messages.h"

namespace {

template <typename Decode, typename Encode>
void round_trip(const std::string& bytes, Decode decode, Encode encode, const char* what) {
  try {
    auto decoded = decode(bytes);
    if (encode(decoded) != bytes) {
      std::fprintf(stderr, "%s: %zu bytes decode but re-encode differently\n", what, bytes.size());
      std::abort();
    }
  } catch (const horo::Error&) {
    // Malformed input, refused as it should be.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  round_trip(bytes, horo::decode_requests, horo::encode_requests, "requests");
  round_trip(bytes, horo::decode_responses, horo::encode_responses, "responses");
  return 0;
}
