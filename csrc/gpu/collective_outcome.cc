#include "gpu/collective_outcome.h"

#include <cstdint>
#include <vector>

#include "common/error.h"

namespace horo {

void agree_outcome(Transport& control, const std::string& local_error, const std::string& what) {
  const int n = control.size(), me = control.rank();
  // One bit per rank, set while that rank succeeded: AND across ranks keeps exactly the successes.
  std::vector<uint64_t> ok((n + 63) / 64, ~uint64_t{0});
  if (!local_error.empty()) ok[me / 64] &= ~(uint64_t{1} << (me % 64));
  control.allreduce_bitand(ok);
  std::vector<int> failed;
  for (int r = 0; r < n; ++r) {
    if (!(ok[r / 64] >> (r % 64) & 1)) failed.push_back(r);
  }
  if (failed.empty()) return;
  // Rank 0 writes the one message every rank throws, so they agree word for word.
  const std::vector<std::string> reasons = control.gather_bytes(local_error, 0);
  std::string message;
  if (me == 0) {
    message = what + " failed on rank" + (failed.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < failed.size(); ++i) message += (i ? ", " : "") + std::to_string(failed[i]);
    for (int r : failed) message += "; rank " + std::to_string(r) + ": " + reasons[r];
  }
  control.broadcast_bytes(message, 0);
  throw Error(message);
}

}  // namespace horo
