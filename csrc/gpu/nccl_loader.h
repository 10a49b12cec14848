// NCCL, opened at run time. Search order: HORO_NCCL_LIB; a libnccl already in
// the process (CUDA torch loads one: two copies in one process would not share
// communicators safely); the nvidia-nccl-cu13/cu12 wheels Python found; the
// system loader path.
#pragma once

#include <string>
#include <vector>

#include "gpu/nccl_api.h"

namespace horo::nccl {

struct Api {
#define HORO_TABLE_ENTRY(symbol, result, params) symbol##_t symbol = nullptr;
  HORO_NCCL_FUNCTIONS(HORO_TABLE_ENTRY)
#undef HORO_TABLE_ENTRY
  int version = 0;  // ncclGetVersion: major * 10000 + minor * 100 + patch (2.9 and later)
};

// The oldest NCCL horo accepts: ncclCommInitRankConfig (a non-blocking init, so a
// failing peer cannot hang the others) arrived in 2.14; ncclAvg and PreMulSum in 2.11.
constexpr int kMinimumVersion = 21400;

void set_wheel_candidates(std::vector<std::string> paths);
const Api& api();
const Api* try_api(std::string* why);
std::string library_path();
std::vector<std::string> search_order();
std::vector<std::string> symbol_names();
// "2.30.7" from ncclGetVersion's integer.
std::string version_string(int version);

// Throws horo::Error("<what>: <NCCL's message>") unless `result` is success.
void check(Result result, const char* what);

}  // namespace horo::nccl
