// One shared-memory segment per process set per host: a header with the
// doorbell, one cache line of state per rank (its sequence number and pid),
// per rank two half-slots (double buffering) of `chunk_bytes` each plus
// a small mailbox, and per rank two areas of `preload_bytes` for inputs that
// travel with the control step (ShmCapabilities::preload). Created by the set's
// rank 0 under a name unique to the job (pid, random bits, a counter), mode
// 0600, and unlinked as soon as every rank has it mapped: a crash afterwards
// leaves nothing in /dev/shm. Every rank lays it out with rank 0's sizes.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/shm/futex_wait.h"

namespace horo {

// Each rank's own cache line: peers poll it and ring its bell.
struct alignas(64) ShmRankState {
  std::atomic<uint64_t> seq{0};  // steps this rank has completed
  std::atomic<int32_t> pid{0};
  Doorbell idle;  // the rank's idle background thread sleeps here
  // How much of each preload area holds this cycle's input: (cycle << 32) | bytes. A root's
  // input is copied in after its arrival at the control step, piece by piece (ShmTransport).
  std::atomic<uint64_t> preloaded[2] = {0, 0};
  // Where an exchange's output lies in the rank's heap, sent with the control step (preload_output).
  std::atomic<uint64_t> output_at[2] = {0, 0};
  // 1 while a caller thread of this rank runs its cycles (Engine::help): peers that begin a
  // cycle need not wake its background thread then. Set and cleared every blocking call, and
  // read by peers only when a step is slow: a line of its own, not the one they poll `seq` on
  // (with three other changes to a call's path, a 4 B broadcast 7% faster, np=2).
  alignas(64) std::atomic<uint32_t> caller_cycles{0};
};

// Small fixed-size values a round carries beside its data (lengths, counts).
struct alignas(64) ShmMailbox {
  uint64_t words[8];
};

class ShmSegment {
 public:
  // Collective over `comm` (every rank on this host). Throws horo::Error,
  // on every rank, when the segment cannot be created or mapped.
  ShmSegment(MPI_Comm comm, size_t chunk_bytes, size_t preload_bytes);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  size_t chunk_bytes() const { return chunk_bytes_; }
  Doorbell& bell() { return header()->bell; }
  ShmRankState& state(int rank) { return states()[rank]; }
  ShmMailbox& mailbox(int rank, int half) { return *reinterpret_cast<ShmMailbox*>(slot(rank, half)); }
  char* data(int rank, int half) { return slot(rank, half) + sizeof(ShmMailbox); }
  size_t preload_bytes() const { return preload_bytes_; }
  char* preload_area(int rank, int parity) {
    return base_ + preload_at_ + (static_cast<size_t>(rank) * 2 + parity) * preload_stride_;
  }
  const std::string& name() const { return name_; }

 private:
  struct alignas(64) Header {
    Doorbell bell;
  };
  Header* header() { return reinterpret_cast<Header*>(base_); }
  ShmRankState* states() { return reinterpret_cast<ShmRankState*>(base_ + sizeof(Header)); }
  char* slot(int rank, int half) { return base_ + slots_at_ + (static_cast<size_t>(rank) * 2 + half) * slot_stride_; }

  char* base_ = nullptr;
  size_t bytes_ = 0;
  size_t chunk_bytes_ = 0;
  size_t slots_at_ = 0;
  size_t slot_stride_ = 0;
  size_t preload_bytes_ = 0;
  size_t preload_at_ = 0;
  size_t preload_stride_ = 0;
  std::string name_;
};

}  // namespace horo
