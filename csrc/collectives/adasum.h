// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation"),
// as Horovod computes it on CPU: a recursive pairwise combination of the ranks'
// vectors,
//     adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b,
// rank 2i with 2i+1 first, then those pairs pairwise, and so on up a binary tree,
// which is why the rank count must be a power of two.
//
// It runs as vector halving, distance doubling: at level L each rank swaps half
// of its current window with rank ^ L and combines the half it keeps, after the
// 2L ranks that hold pieces of the same two vectors have summed their partial
// dot products and norms (recursive doubling, so every rank gets the same
// coefficients). Then the halves travel back the same way (distance halving),
// so every rank ends with the same result. Dot products and norms are per
// tensor of a fused buffer, as Horovod's fused Adasum computes them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/types.h"
#include "transport/transport.h"

namespace horo {

class AdasumAllreduce {
 public:
  // Why Adasum cannot reduce `dtype` over `ranks` ranks, or "" where it can.
  static std::string unsupported(int ranks, DataType dtype);

  // Combines `buffer` (every rank's, in place) tensor by tensor: counts[k]
  // elements of tensor k, one after another.
  void allreduce(Transport& t, void* buffer, const std::vector<size_t>& counts, DataType dtype);

 private:
  // Sums `values` over the 2*level ranks whose rank / (2*level) is this rank's.
  void sum_over_group(Transport& t, int level);

  std::vector<char> received_;
  std::vector<double> sums_, peer_sums_;  // per tensor: a.b, |a|^2, |b|^2
};

}  // namespace horo
