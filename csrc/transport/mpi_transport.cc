#include "transport/mpi_transport.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <thread>

#include "common/error.h"
#include "transport/peer_watch.h"

namespace horo {

void mpi_check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(std::string(call) + " failed: " + std::string(text, length));
}

#define HORO_MPI(call) mpi_check((call), #call)

namespace {

// One MPI message carries at most INT_MAX bytes; larger buffers are split.
constexpr size_t kMaxMessageBytes = size_t(1) << 30;

MPI_Datatype mpi_dtype(DataType dtype, bool* ok) {
  *ok = true;
  switch (dtype) {
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kInt16: return MPI_INT16_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kFloat16:
    case DataType::kBFloat16: break;  // MPI has no 16-bit float reductions
    case DataType::kBool: break;      // never reduced
  }
  *ok = false;
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op, bool* ok) {
  *ok = true;
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kProduct: return MPI_PROD;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kAdasum: break;
  }
  *ok = false;
  return MPI_OP_NULL;
}

// Waits for `count` requests without pinning a core. MPI_Wait busy-polls,
// while a CPU training job runs its compute threads on the same cores as this
// background thread. Most waits (a ring chunk, a coordination round) end within
// tens of microseconds: spin through those, then poll with yields (a runnable
// compute thread gets the core), then with short sleeps (a late peer costs little).
// Across hosts the sleeps are off: with Open MPI 5's TCP BTL, a user thread
// blocked in MPI (mpi4py's COMM_WORLD.Barrier()) never returned while this
// thread slept between tests; yielding instead lets both finish
// (tests/test_cluster.py reproduces it on namespaced hosts).
std::atomic<bool> g_waits_may_sleep{true};

//
// Every wait has a deadline (peer_watch.h): a peer whose host went off the
// network would otherwise keep this loop, and the job, waiting forever.
void wait_politely(MPI_Request* requests, int count, const char* what) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  WaitDeadline deadline(what);
  const auto spin_until = start + std::chrono::microseconds(50);
  const auto yield_until = start + std::chrono::microseconds(1000);
  int done = 0;
  while (true) {
    HORO_MPI(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    const auto now = clock::now();
    if (now < spin_until) continue;
    deadline.poll(now);
    if (now < yield_until || !g_waits_may_sleep.load(std::memory_order_relaxed)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

// Starts a collective non-blocking and waits for it politely: MPI's blocking
// collectives can neither yield the core nor give up on a lost peer.
template <typename Start>
void collective(const char* what, Start start) {
  MPI_Request request;
  mpi_check(start(&request), what);
  wait_politely(&request, 1, what);
}

}  // namespace

void set_mpi_waits_may_sleep(bool may_sleep) { g_waits_may_sleep = may_sleep; }

MpiTransport::MpiTransport(MPI_Comm comm, TransportSettings settings) : comm_(comm), settings_(std::move(settings)) {
  HORO_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  HORO_MPI(MPI_Comm_rank(comm_, &rank_));
  HORO_MPI(MPI_Comm_size(comm_, &size_));
  HORO_MPI(MPI_Comm_dup(comm_, &user_comm_));
  HORO_MPI(MPI_Comm_set_errhandler(user_comm_, MPI_ERRORS_RETURN));
  int* tag_ub = nullptr;
  int found = 0;
  HORO_MPI(MPI_Comm_get_attr(user_comm_, MPI_TAG_UB, &tag_ub, &found));
  if (found && tag_ub) max_tag_ = *tag_ub;
}

MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && user_comm_ != MPI_COMM_NULL) MPI_Comm_free(&user_comm_);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

int MpiTransport::isend(const void* buf, size_t bytes, int peer) {
  if (bytes > kMaxMessageBytes) throw Error("point-to-point message over 1 GiB; split it");
  MPI_Request request;
  HORO_MPI(MPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, 0, comm_, &request));
  return keep(request);
}

int MpiTransport::irecv(void* buf, size_t bytes, int peer) {
  if (bytes > kMaxMessageBytes) throw Error("point-to-point message over 1 GiB; split it");
  MPI_Request request;
  HORO_MPI(MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, 0, comm_, &request));
  return keep(request);
}

int MpiTransport::keep(MPI_Request request) {
  if (free_slots_.empty()) {
    requests_.push_back(request);
    return static_cast<int>(requests_.size() - 1);
  }
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  requests_[slot] = request;
  return slot;
}

void MpiTransport::wait(int slot) {
  wait_politely(&requests_[slot], 1, "a point-to-point transfer");
  free_slots_.push_back(slot);
}

void MpiTransport::wait_all() {
  if (requests_.empty()) return;
  wait_politely(requests_.data(), static_cast<int>(requests_.size()), "point-to-point transfers");
  requests_.clear();
  free_slots_.clear();
}

int MpiTransport::keep_posted(MPI_Request request) {
  if (free_posted_.empty()) {
    posted_.push_back(request);
    return static_cast<int>(posted_.size() - 1);
  }
  const int id = free_posted_.back();
  free_posted_.pop_back();
  posted_[id] = request;
  return id;
}

int MpiTransport::post_send(const void* buf, size_t bytes, int peer, int tag) {
  if (bytes > kMaxMessageBytes) throw Error("point-to-point message over 1 GiB; split it");
  MPI_Request request;
  HORO_MPI(MPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, user_comm_, &request));
  return keep_posted(request);
}

int MpiTransport::post_recv(void* buf, size_t bytes, int peer, int tag) {
  if (bytes > kMaxMessageBytes) throw Error("point-to-point message over 1 GiB; split it");
  MPI_Request request;
  HORO_MPI(MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, user_comm_, &request));
  return keep_posted(request);
}

bool MpiTransport::test_posted(int id, size_t* received) {
  int done = 0;
  MPI_Status status;
  const int code = MPI_Test(&posted_[id], &done, &status);
  if (code != MPI_SUCCESS) {
    // MPI_ERR_TRUNCATE and its kin complete the request: the id is free either way.
    free_posted_.push_back(id);
    int error_class = 0;
    MPI_Error_class(code, &error_class);
    if (error_class == MPI_ERR_TRUNCATE) throw Error("the message is larger than the receive buffer");
    mpi_check(code, "MPI_Test");
  }
  if (!done) return false;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  *received = static_cast<size_t>(count);
  free_posted_.push_back(id);
  return true;
}

namespace {

// MPI's own reduction for this dtype/op, when it computes what ours would.
bool mpi_reduction(DataType dtype, ReduceOp op, MPI_Datatype* type, MPI_Op* mop) {
  bool dtype_ok = false;
  bool op_ok = false;
  *type = mpi_dtype(dtype, &dtype_ok);
  *mop = mpi_op(op, &op_ok);
  if (!dtype_ok || !op_ok) return false;
  // Open MPI 5's vectorised op component saturates 8- and 16-bit MPI_SUM/MPI_PROD
  // instead of wrapping (255 + 4 gives 255); our own kernels wrap like NumPy.
  const bool narrow = dtype == DataType::kUInt8 || dtype == DataType::kInt8 || dtype == DataType::kInt16;
  return !(narrow && (*mop == MPI_SUM || *mop == MPI_PROD));
}

// MPI's vector collectives take int counts and displacements (both vectors are refilled).
void int_counts(const std::vector<size_t>& counts, std::vector<int>* out, std::vector<int>* displs) {
  out->clear();
  displs->clear();
  size_t offset = 0;
  for (size_t c : counts) {
    if (c > kMaxMessageBytes || offset > static_cast<size_t>(INT_MAX)) {
      throw Error("a collective over more than 1 GiB per rank is not supported by this MPI path");
    }
    out->push_back(static_cast<int>(c));
    displs->push_back(static_cast<int>(offset));
    offset += c;
  }
}

}  // namespace

bool MpiTransport::native_allreduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op) {
  MPI_Datatype type;
  MPI_Op mop;
  if (!mpi_reduction(dtype, op, &type, &mop)) return false;
  const size_t esize = dtype_size(dtype);
  const size_t max_count = kMaxMessageBytes / esize;
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(max_count, count - done);
    const void* send = in == out ? MPI_IN_PLACE : static_cast<const void*>(in + done * esize);
    collective("MPI_Iallreduce", [&](MPI_Request* r) {
      return MPI_Iallreduce(send, out + done * esize, static_cast<int>(n), type, mop, comm_, r);
    });
    done += n;
  }
  return true;
}

bool MpiTransport::native_reduce_scatter(const void* input, void* output, const std::vector<size_t>& counts,
                                         DataType dtype, ReduceOp op) {
  MPI_Datatype type;
  MPI_Op mop;
  if (!mpi_reduction(dtype, op, &type, &mop)) return false;
  counts_.clear();
  for (size_t c : counts) {
    if (c * dtype_size(dtype) > kMaxMessageBytes) return false;  // the ring has no such limit
    counts_.push_back(static_cast<int>(c));
  }
  const void* send = input == output ? MPI_IN_PLACE : input;
  collective("MPI_Ireduce_scatter", [&](MPI_Request* r) {
    return MPI_Ireduce_scatter(send, output, counts_.data(), type, mop, comm_, r);
  });
  return true;
}

void MpiTransport::native_allgatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts) {
  int_counts(byte_counts, &counts_, &displs_);
  collective("MPI_Iallgatherv", [&](MPI_Request* r) {
    return MPI_Iallgatherv(mine, counts_[rank_], MPI_BYTE, output, counts_.data(), displs_.data(), MPI_BYTE, comm_, r);
  });
}

void MpiTransport::alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                             const std::vector<size_t>& recv_bytes) {
  int_counts(send_bytes, &counts_, &displs_);
  int_counts(recv_bytes, &recv_counts_, &recv_displs_);
  collective("MPI_Ialltoallv", [&](MPI_Request* r) {
    return MPI_Ialltoallv(input, counts_.data(), displs_.data(), MPI_BYTE, output, recv_counts_.data(),
                          recv_displs_.data(), MPI_BYTE, comm_, r);
  });
}

void MpiTransport::broadcast(void* buf, size_t bytes, int root) {
  char* p = static_cast<char*>(buf);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kMaxMessageBytes, bytes - done);
    collective("MPI_Ibcast", [&](MPI_Request* r) {
      return MPI_Ibcast(p + done, static_cast<int>(n), MPI_BYTE, root, comm_, r);
    });
    done += n;
  }
}

void MpiTransport::gatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts, int root) {
  int_counts(byte_counts, &counts_, &displs_);
  collective("MPI_Igatherv", [&](MPI_Request* r) {
    return MPI_Igatherv(mine, counts_[rank_], MPI_BYTE, output, counts_.data(), displs_.data(), MPI_BYTE, root, comm_,
                        r);
  });
}

void MpiTransport::scatterv(const void* input, const std::vector<size_t>& byte_counts, void* mine, int root) {
  int_counts(byte_counts, &counts_, &displs_);
  collective("MPI_Iscatterv", [&](MPI_Request* r) {
    return MPI_Iscatterv(input, counts_.data(), displs_.data(), MPI_BYTE, mine, counts_[rank_], MPI_BYTE, root, comm_,
                         r);
  });
}

bool MpiTransport::native_reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                                 int root) {
  MPI_Datatype type;
  MPI_Op mop;
  if (!mpi_reduction(dtype, op, &type, &mop)) return false;
  if (count * dtype_size(dtype) > kMaxMessageBytes) return false;
  const void* send = (input == output && rank_ == root) ? MPI_IN_PLACE : input;
  collective("MPI_Ireduce", [&](MPI_Request* r) {
    return MPI_Ireduce(send, output, static_cast<int>(count), type, mop, root, comm_, r);
  });
  return true;
}

void MpiTransport::barrier() { collective("MPI_Ibarrier", [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); }); }

std::unique_ptr<Transport> MpiTransport::split(const std::vector<int>& members) {
  const bool member = std::find(members.begin(), members.end(), rank_) != members.end();
  MPI_Comm sub = MPI_COMM_NULL;
  HORO_MPI(MPI_Comm_split(comm_, member ? 0 : MPI_UNDEFINED, rank_, &sub));
  if (!member) return nullptr;
  return choose_transport(std::make_unique<MpiTransport>(sub, settings_));
}

void MpiTransport::allreduce_bitand(std::vector<uint64_t>& words) {
  collective("the coordination round (MPI_Iallreduce)", [&](MPI_Request* r) {
    return MPI_Iallreduce(MPI_IN_PLACE, words.data(), static_cast<int>(words.size()), MPI_UINT64_T, MPI_BAND, comm_, r);
  });
}

std::vector<std::string> MpiTransport::gather_bytes(const std::string& mine, int root) {
  int my_length = static_cast<int>(mine.size());
  std::vector<int> lengths(rank_ == root ? size_ : 0);
  collective("MPI_Igather", [&](MPI_Request* r) {
    return MPI_Igather(&my_length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm_, r);
  });
  std::vector<int> offsets(lengths.size());
  std::string all;
  if (rank_ == root) {
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[r] = total;
      total += lengths[r];
    }
    all.resize(total);
  }
  collective("MPI_Igatherv", [&](MPI_Request* r) {
    return MPI_Igatherv(mine.data(), my_length, MPI_BYTE, all.data(), lengths.data(), offsets.data(), MPI_BYTE,
                        root, comm_, r);
  });
  std::vector<std::string> out;
  if (rank_ == root) {
    for (int r = 0; r < size_; ++r) out.emplace_back(all.substr(offsets[r], lengths[r]));
  }
  return out;
}

void MpiTransport::broadcast_bytes(std::string& data, int root) {
  int64_t length = static_cast<int64_t>(data.size());
  collective("MPI_Ibcast", [&](MPI_Request* r) { return MPI_Ibcast(&length, 1, MPI_INT64_T, root, comm_, r); });
  data.resize(length);
  if (length > 0) collective("MPI_Ibcast", [&](MPI_Request* r) {
    return MPI_Ibcast(data.data(), static_cast<int>(length), MPI_BYTE, root, comm_, r);
  });
}

}  // namespace horo
