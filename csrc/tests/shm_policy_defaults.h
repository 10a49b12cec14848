// The tunables the shared-memory policy tests start from: the table's defaults, with every
// HORO_SHM_* threshold left to the policy (auto), whatever the environment says.
#pragma once

#include <cstdint>

#include "common/tunables.h"

namespace horo {

constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;

inline Tunables shm_policy_defaults() {
  Tunables t = Tunables::from_environment();  // the table's defaults (no HORO_SHM_* set in ctest's environment)
  t.shm_small_bytes = 16 * KiB;
  t.shm_preload_bytes = 64 * KiB;
  t.shm_stream_bytes = -1;
  t.shm_single_copy_bytes = t.shm_exchange_single_copy_bytes = -1;
  t.shm_allreduce_push_bytes = t.shm_reduce_single_copy_bytes = -1;
  t.allreduce_algo = t.allgather_algo = t.reducescatter_algo = "auto";
  return t;
}

}  // namespace horo
