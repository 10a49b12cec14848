// Whether this machine wants non-temporal stores for the shared-memory copies
// (common/stream_bytes.h), found by measuring it once at start-up.
//
// A plain store into a line another core has just read must first take the
// line back from that core's cache. On some VMs that made copies several times
// slower in about half the jobs, where streaming stores, which skip the fetch,
// never were; on others plain copies were always faster. So the ranks ask the
// machine (MEASUREMENTS.md, "Shared-memory data paths").
#pragma once

#include <mpi.h>

#include <cstddef>

namespace horo {

struct StoreProbe {
  double plain_us = 0;   // fastest plain copy into `area`, just read by another rank
  double stream_us = 0;  // the same with streaming stores
  bool stream() const { return plain_us > stream_us; }
};

// Collective over `comm` (at least two ranks): rank 0 copies `bytes` into `area`
// (shared memory every rank maps) while rank 1 reads it between copies, in
// turns plain and streamed. The result is rank 0's; other ranks get zeros.
StoreProbe probe_stores(MPI_Comm comm, char* area, size_t bytes);

}  // namespace horo
