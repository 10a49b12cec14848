// A deterministic mutation fuzzer for LLVMFuzzerTestOneInput, for compilers
// without libFuzzer (gcc): starts from valid encoded requests and responses and
// applies seeded mutations (bit flips, byte overwrites, length fields set to
// huge or off-by-one values, truncation, insertion, splicing, random bytes).
//     horo_fuzz_wire [runs] [seed]        (default 1000000 runs, seed 1)
// Prints the inputs run; any crash or sanitizer report ends the process non-zero.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "wire/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using horo::Request;
using horo::Response;

std::vector<std::string> seed_corpus() {
  Request a;
  a.name = "grad.layer1.weight";
  a.shape = {64, 3, 3};
  Request b = a;
  b.type = horo::CollectiveType::kAlltoall;
  b.dtype = horo::DataType::kBFloat16;
  b.name = "tokens";
  b.shape = {7, 2};
  b.splits = {3, 4};
  b.rejection = "not contiguous";
  Request c;
  c.type = horo::CollectiveType::kBarrier;
  c.name = "";
  Response ok;
  ok.request = a;
  Response gather;
  gather.request = b;
  gather.request.type = horo::CollectiveType::kAllgather;
  gather.per_rank = {3, 4, 5, 6};
  Response error;
  error.kind = Response::Kind::kError;
  error.request = c;
  error.error = "allreduce 'x': shape differs across ranks";
  error.per_rank = {1};
  return {
      horo::encode_requests({a}),        horo::encode_requests({a, b, c}),
      horo::encode_requests({}),         horo::encode_responses({ok}),
      horo::encode_responses({ok, gather, error}),
  };
}

void put_u32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4 && at + i < s.size(); ++i) s[at + i] = static_cast<char>(v >> (8 * i));
}

std::string mutate(const std::vector<std::string>& corpus, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t(0) : static_cast<size_t>(rng() % n); };
  std::string s = corpus[pick(corpus.size())];
  const int rounds = 1 + static_cast<int>(pick(4));
  for (int k = 0; k < rounds; ++k) {
    switch (pick(8)) {
      case 0:  // flip a bit
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 << pick(8));
        break;
      case 1:  // overwrite a byte
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng());
        break;
      case 2: {  // a length-sized field gets a hostile value
        static const uint32_t kLengths[] = {0, 1, 2, 7, 8, 255, 65535, 0x7fffffff, 0xffffffff, 0x20000000};
        if (!s.empty()) put_u32(s, pick(s.size()), kLengths[pick(10)]);
        break;
      }
      case 3:  // truncate
        s.resize(pick(s.size() + 1));
        break;
      case 4: {  // insert random bytes
        std::string junk(1 + pick(16), '\0');
        for (char& ch : junk) ch = static_cast<char>(rng());
        s.insert(pick(s.size() + 1), junk);
        break;
      }
      case 5: {  // splice with another seed
        const std::string& other = corpus[pick(corpus.size())];
        s = s.substr(0, pick(s.size() + 1)) + other.substr(pick(other.size() + 1));
        break;
      }
      case 6:  // duplicate a tail (several messages in one buffer)
        s += s.substr(pick(s.size() + 1));
        break;
      default: {  // entirely random input
        std::string junk(pick(64), '\0');
        for (char& ch : junk) ch = static_cast<char>(rng());
        s = junk;
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const long runs = argc > 1 ? std::atol(argv[1]) : 1000000;
  const unsigned long seed = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1;
  std::mt19937_64 rng(seed);
  std::vector<std::string> corpus = seed_corpus();
  for (const auto& s : corpus) LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  for (long i = 0; i < runs; ++i) {
    const std::string input = mutate(corpus, rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    // Inputs that still decode become seeds too, so later mutations go deeper.
    if (corpus.size() < 4096 && (i % 97) == 0) corpus.push_back(input);
  }
  std::printf("horo_fuzz_wire: %ld inputs run (seed %lu), no crash\n", runs + static_cast<long>(5), seed);
  return 0;
}
