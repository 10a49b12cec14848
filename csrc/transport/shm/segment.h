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
#include <type_traits>

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
  // read by peers only when a step is slow: a line of its own, so that every call's two writes do
  // not pull the line the peers poll `seq` on (MEASUREMENTS.md, "A blocking call's fixed cost").
  alignas(64) std::atomic<uint32_t> caller_cycles{0};
};

// Small fixed-size values a round carries beside its data. A word means different things in
// different collectives, so each meaning has its own accessor, named for what it holds: a reader
// says what it expects, and which meanings share a word is written here once.
struct alignas(64) ShmMailbox {
  // Word 0: a buffer's address in this rank's memory, for peers to read or write
  // (ShmContext::publish_addresses).
  uint64_t& address() { return words_[0]; }
  // Word 0: where this rank's output lies in its heap (ShmHeap::locate), or ShmHeap::kNowhere.
  uint64_t& output_location() { return words_[0]; }
  // Word 0: the length of the bytes the control plane gathers or broadcasts.
  uint64_t& length() { return words_[0]; }
  // Word 0: how many slot rounds this rank's part of an alltoall needs.
  uint64_t& rounds() { return words_[0]; }
  // Word 1: the address of this rank's input.
  uint64_t& input() { return words_[1]; }
  // Word 1: how many bytes of the root's buffer a broadcast's reader reads itself; the root
  // writes the rest (published with address()).
  uint64_t& bytes_read() { return words_[1]; }
  // Word 2: the address of this rank's output.
  uint64_t& output() { return words_[2]; }
  // Word 2: the address of an alltoall's send offsets, one size_t per peer.
  uint64_t& send_at() { return words_[2]; }
  // Word 3: which of this rank's accesses to a peer's memory failed (ShmContext::finish_reads):
  // 0 none, kReadFailed or kWriteFailed.
  uint64_t& access_failed() { return words_[3]; }
  static constexpr uint64_t kReadFailed = 1, kWriteFailed = 2;
  // Word 3: 1 when this rank reads part of an alltoall straight from a peer's memory.
  uint64_t& reads_directly() { return words_[3]; }

 private:
  uint64_t words_[8];  // 4 to 7 unused: one cache line per mailbox, as the segment lays it out
};
// The segment's layout (slot_stride_) and every rank's view of it depend on this size.
static_assert(sizeof(ShmMailbox) == 64 && alignof(ShmMailbox) == 64, "a mailbox is one cache line");
static_assert(std::is_standard_layout_v<ShmMailbox> && std::is_trivially_copyable_v<ShmMailbox>,
              "a mailbox lives in shared memory, read through reinterpret_cast");

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
