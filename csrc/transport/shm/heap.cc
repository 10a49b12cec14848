#include "transport/shm/heap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/logging.h"

namespace horo {

namespace {

constexpr size_t kLine = 64;  // every block starts on its own cache line

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Through syscall(): glibc before 2.27 (manylinux2014's) has no wrapper. Kernel headers
// without the call (before Linux 3.17) leave the heap off: -1 with ENOSYS.
int make_memfd(const char* name) {
#ifdef SYS_memfd_create
  constexpr unsigned kCloseOnExec = 1;  // MFD_CLOEXEC
  return static_cast<int>(syscall(SYS_memfd_create, name, kCloseOnExec));
#else
  (void)name;
  errno = ENOSYS;
  return -1;
#endif
}

void* map_shared(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

// Best fit over the free blocks, merged with their neighbours when given back:
// a training loop asks for the same sizes step after step, and gets the same
// (already mapped) pages back.
class ShmHeap::Arena {
 public:
  Arena(char* base, size_t bytes) : base_(base), bytes_(bytes) { insert(0, bytes); }
  ~Arena() { munmap(base_, bytes_); }

  char* base() const { return base_; }
  size_t bytes() const { return bytes_; }

  char* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto fit = by_size_.lower_bound(bytes);
    if (fit == by_size_.end()) return nullptr;
    const size_t size = fit->first, at = fit->second;
    erase(at, size);
    if (size > bytes) insert(at + bytes, size - bytes);
    return base_ + at;
  }

  void give_back(char* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t at = static_cast<size_t>(p - base_);
    auto next = by_offset_.lower_bound(at);
    if (next != by_offset_.end() && next->first == at + bytes) {
      bytes += next->second;
      erase(next->first, next->second);
    }
    auto after = by_offset_.lower_bound(at);
    if (after != by_offset_.begin()) {
      auto prev = std::prev(after);
      if (prev->first + prev->second == at) {
        at = prev->first;
        bytes += prev->second;
        erase(prev->first, prev->second);
      }
    }
    insert(at, bytes);
  }

 private:
  // The maps' nodes are kept and used again: a steady state (the same sizes taken and given
  // back, call after call) then allocates nothing, as a small collective must not
  // (tests/mpi/ranks_shm.py counts every malloc).
  void insert(size_t at, size_t size) {
    insert_node(by_offset_, spare_offsets_, at, size);
    insert_node(by_size_, spare_sizes_, size, at);
  }
  void erase(size_t at, size_t size) {
    if (auto node = by_offset_.extract(at)) spare_offsets_.push_back(std::move(node));
    for (auto it = by_size_.lower_bound(size); it != by_size_.end() && it->first == size; ++it) {
      if (it->second == at) {
        spare_sizes_.push_back(by_size_.extract(it));
        return;
      }
    }
  }
  template <class Map>
  static void insert_node(Map& map, std::vector<typename Map::node_type>& spares, size_t key, size_t value) {
    if (spares.empty()) {
      map.emplace(key, value);
      return;
    }
    typename Map::node_type node = std::move(spares.back());
    spares.pop_back();
    node.key() = key;
    node.mapped() = value;
    map.insert(std::move(node));
  }

  char* base_;
  size_t bytes_;
  std::mutex mutex_;
  std::map<size_t, size_t> by_offset_;     // free blocks: offset -> size
  std::multimap<size_t, size_t> by_size_;  // the same: size -> offset
  std::vector<std::map<size_t, size_t>::node_type> spare_offsets_;
  std::vector<std::multimap<size_t, size_t>::node_type> spare_sizes_;
};

ShmHeap::ShmHeap(MPI_Comm comm, size_t bytes) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  bytes = round_up(bytes, 4096);
  std::string why;
  int fd = -1;
  if (bytes > 0) {
    fd = make_memfd("horo-heap");
    if (fd < 0) {
      why = std::string("memfd_create: ") + strerror(errno);
    } else if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      why = std::string("ftruncate: ") + strerror(errno);
    }
  } else {
    why = "none asked for";
  }
  int64_t card[3] = {getpid(), fd, why.empty() ? static_cast<int64_t>(bytes) : 0};
  std::vector<int64_t> cards(3 * static_cast<size_t>(size));
  MPI_Allgather(card, 3, MPI_INT64_T, cards.data(), 3, MPI_INT64_T, comm);
  mapped_.assign(size, nullptr);
  sizes_.assign(size, 0);
  for (int r = 0; r < size && why.empty(); ++r) {
    sizes_[r] = static_cast<size_t>(cards[3 * r + 2]);
    if (sizes_[r] == 0) {
      why = "rank " + std::to_string(r) + " has none";
      break;
    }
    int peer_fd = fd;
    if (r != rank) {
      const std::string path = "/proc/" + std::to_string(cards[3 * r]) + "/fd/" + std::to_string(cards[3 * r + 1]);
      peer_fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
      if (peer_fd < 0) {
        why = "open(" + path + "): " + strerror(errno);
        break;
      }
    }
    mapped_[r] = static_cast<char*>(map_shared(peer_fd, sizes_[r]));
    if (peer_fd != fd) close(peer_fd);
    if (mapped_[r] == nullptr) why = "mmap of rank " + std::to_string(r) + "'s heap: " + strerror(errno);
  }
  // Everyone has opened every heap (or failed) before any rank closes its own descriptor.
  int ok = why.empty() ? 1 : 0, everyone = 0;
  MPI_Allreduce(&ok, &everyone, 1, MPI_INT, MPI_MIN, comm);
  if (fd >= 0) close(fd);
  if (everyone) {
    own_ = std::make_shared<Arena>(mapped_[rank], sizes_[rank]);
    return;
  }
  // None asked for (HORO_SHM_HEAP_BYTES=0, a set of one) is not news.
  if (bytes > 0) HORO_LOG(kLogInfo, "no shared-memory output heap (" << why << "): exchanges use the segment");
  for (int r = 0; r < size; ++r) {
    if (mapped_[r]) munmap(mapped_[r], sizes_[r]);
  }
  mapped_.assign(size, nullptr);
}

ShmHeap::~ShmHeap() {
  for (size_t r = 0; r < mapped_.size(); ++r) {
    if (mapped_[r] && (!own_ || mapped_[r] != own_->base())) munmap(mapped_[r], sizes_[r]);
  }
}

std::function<std::shared_ptr<char>(size_t)> ShmHeap::allocator() const {
  return [arena = own_](size_t bytes) { return arena ? allocate(arena, bytes) : nullptr; };
}

std::shared_ptr<char> ShmHeap::allocate(const std::shared_ptr<Arena>& arena, size_t bytes) {
  bytes = round_up(bytes > 0 ? bytes : 1, kLine);
  char* p = arena->take(bytes);
  if (p == nullptr) return nullptr;
  return std::shared_ptr<char>(p, [arena, bytes](char* q) { arena->give_back(q, bytes); });
}

uint64_t ShmHeap::locate(const void* p, size_t bytes) const {
  if (bytes == 0) return 0;
  if (!own_) return kNowhere;
  const char* c = static_cast<const char*>(p);
  if (c < own_->base() || c + bytes > own_->base() + own_->bytes()) return kNowhere;
  return static_cast<uint64_t>(c - own_->base());
}

}  // namespace horo
