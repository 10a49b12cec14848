// Transport over an MPI communicator of our own (a dup of the world or of
// the user's communicator), so horo's traffic never matches user messages.
#pragma once

#include <mpi.h>

#include <vector>

#include "transport/transport.h"
#include "transport/transport_choice.h"

namespace horo {

class MpiTransport : public Transport {
 public:
  // Takes ownership of `comm` (freed in the destructor). `settings` say
  // which transport the sets split from this one get (transport_choice.h).
  explicit MpiTransport(MPI_Comm comm, TransportSettings settings = {});
  ~MpiTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm comm() const { return comm_; }
  const TransportSettings& settings() const { return settings_; }

  int isend(const void* buf, size_t bytes, int peer) override;
  int irecv(void* buf, size_t bytes, int peer) override;
  void wait(int slot) override;
  void wait_all() override;

  int post_send(const void* buf, size_t bytes, int peer, int tag) override;
  int post_recv(void* buf, size_t bytes, int peer, int tag) override;
  bool test_posted(int id, size_t* received) override;
  int max_tag() const override { return max_tag_; }

  bool native_allreduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op) override;
  bool native_reduce_scatter(const void* input, void* output, const std::vector<size_t>& counts, DataType dtype,
                             ReduceOp op) override;
  void native_allgatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts) override;
  void alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                 const std::vector<size_t>& recv_bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void gatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts, int root) override;
  void scatterv(const void* input, const std::vector<size_t>& byte_counts, void* mine, int root) override;
  bool native_reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op, int root) override;
  void barrier() override;
  std::unique_ptr<Transport> split(const std::vector<int>& members) override;

  void allreduce_bitand(std::vector<uint64_t>& words) override;
  std::vector<std::string> gather_bytes(const std::string& mine, int root) override;
  void broadcast_bytes(std::string& data, int root) override;

 private:
  int keep(MPI_Request request);         // a slot for wait()
  int keep_posted(MPI_Request request);  // an id for test_posted()

  MPI_Comm comm_;
  // Users' point-to-point: a communicator of its own, so its tags never match the collectives'.
  MPI_Comm user_comm_ = MPI_COMM_NULL;
  int max_tag_ = 32767;
  std::vector<MPI_Request> posted_;
  std::vector<int> free_posted_;
  TransportSettings settings_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<MPI_Request> requests_;
  std::vector<int> free_slots_;
  // The vector collectives' int counts and displacements, kept for their capacity.
  std::vector<int> counts_, displs_, recv_counts_, recv_displs_;
};

// Whether waits on MPI requests may sleep once they have spun and yielded for
// a while (process-wide; off for jobs that span hosts, see mpi_transport.cc).
void set_mpi_waits_may_sleep(bool may_sleep);

// Throws horo::Error naming the MPI call when it fails.
void mpi_check(int code, const char* call);

}  // namespace horo
