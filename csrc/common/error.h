// One error type crosses every layer: it carries a message that already names
// the tensor, the ranks and the mismatch, and becomes horo.HoroError in Python.
#pragma once

#include <stdexcept>
#include <string>

namespace horo {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller's mistake, found as the collective is submitted (e.g. a name already in flight):
// horo.HoroValueError in Python, which is also a ValueError, as Horovod raises.
class ArgumentError : public Error {
 public:
  using Error::Error;
};

// A collective that failed after it was submitted (ranks disagreed, a rank left, MPI failed),
// reported at synchronize: horo.HorovodInternalError, a RuntimeError, as in Horovod.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// Peers stopped answering a wait for the network (transport/peer_watch.h): the
// message names them and their hosts. MPI cannot go on past it, so the engine stops.
class PeerUnreachable : public Error {
 public:
  using Error::Error;
};

}  // namespace horo
