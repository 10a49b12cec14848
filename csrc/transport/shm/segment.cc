#include "transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <random>

#include "common/error.h"

namespace horo {

namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::string unique_name() {
  static std::atomic<unsigned> counter{0};
  std::random_device random;
  char name[96];
  snprintf(name, sizeof(name), "/horo-%d-%08x%08x-%u", static_cast<int>(getpid()), random(), random(),
           counter.fetch_add(1));
  return name;
}

// Every rank learns whether every rank succeeded, so a failure raises everywhere instead of hanging some.
void agree(MPI_Comm comm, const std::string& my_error) {
  int ok = my_error.empty() ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
  if (all_ok) return;
  throw Error(my_error.empty() ? std::string("shared-memory segment setup failed on another rank of the process set")
                               : my_error);
}

}  // namespace

ShmSegment::ShmSegment(MPI_Comm comm, size_t chunk_bytes, size_t preload_bytes) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Rank 0's sizes for everyone: a setting that differs between ranks' environments
  // must not give them different layouts of one segment (or a mapping past its end).
  uint64_t sizes[2] = {chunk_bytes, preload_bytes};
  MPI_Bcast(sizes, 2, MPI_UINT64_T, 0, comm);
  chunk_bytes = sizes[0];
  preload_bytes = sizes[1];
  chunk_bytes_ = round_up(chunk_bytes, 64);
  slots_at_ = round_up(64 + sizeof(ShmRankState) * size, 4096);
  slot_stride_ = round_up(sizeof(ShmMailbox) + chunk_bytes_, 4096);
  preload_bytes_ = preload_bytes;
  preload_at_ = slots_at_ + slot_stride_ * 2 * size;
  preload_stride_ = round_up(preload_bytes, 4096);
  bytes_ = preload_at_ + preload_stride_ * 2 * size;

  std::string error;
  char name[128] = {0};
  int fd = -1;
  if (rank == 0) {
    name_ = unique_name();
    fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      error = "shm_open(" + name_ + ") failed: " + strerror(errno);
    } else {
      // posix_fallocate, not ftruncate alone: a full /dev/shm is an error now, not a SIGBUS later.
      const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes_));
      if (rc != 0) error = "cannot reserve " + std::to_string(bytes_) + " bytes in /dev/shm: " + strerror(rc);
    }
    snprintf(name, sizeof(name), "%s", name_.c_str());
  }
  MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, comm);
  name_ = name;
  try {
    agree(comm, error);
  } catch (...) {
    if (rank == 0 && fd >= 0) {
      close(fd);
      shm_unlink(name_.c_str());
    }
    throw;
  }
  if (rank != 0) {
    fd = shm_open(name_.c_str(), O_RDWR, 0600);
    if (fd < 0) error = "shm_open(" + name_ + ") failed: " + strerror(errno);
  }
  void* mapped = MAP_FAILED;
  if (fd >= 0) {
    mapped = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) error = "mmap of " + name_ + " failed: " + strerror(errno);
    close(fd);
  }
  // Everyone has opened it (or failed): the name can go.
  MPI_Barrier(comm);
  if (rank == 0) shm_unlink(name_.c_str());
  if (mapped != MAP_FAILED) base_ = static_cast<char*>(mapped);
  try {
    agree(comm, error);
  } catch (...) {
    if (base_) munmap(base_, bytes_);
    base_ = nullptr;
    throw;
  }
  // The file starts zeroed, which is the initial state of every atomic in it.
  state(rank).pid.store(static_cast<int32_t>(getpid()));
  MPI_Barrier(comm);
}

ShmSegment::~ShmSegment() {
  if (base_) munmap(base_, bytes_);
}

}  // namespace horo
