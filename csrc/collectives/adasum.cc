#include "collectives/adasum.h"

#include <algorithm>
#include <cstdint>

#include "reduce/half.h"

namespace horo {

namespace {

// Below this a vector counts as zero and keeps its coefficient 1 (Horovod's threshold).
constexpr double kZeroNormSquared = 1e-8;

template <typename T>
double load(const T* p, size_t i) {
  return static_cast<double>(p[i]);
}
template <>
double load<uint16_t>(const uint16_t* p, size_t i) {
  return static_cast<double>(half_to_float(p[i]));
}

template <typename T>
void store(T* p, size_t i, double v) {
  p[i] = static_cast<T>(v);
}
template <>
void store<uint16_t>(uint16_t* p, size_t i, double v) {
  p[i] = float_to_half(static_cast<float>(v));
}

// Adds a.b, |a|^2 and |b|^2 of n elements to sums[0..2]. Eight independent partial
// sums per quantity: a single chain of float64 additions cannot be vectorised (the
// compiler may not reorder it), and it ran this step about 4x slower.
template <typename T>
void dot_and_norms(const T* a, const T* b, size_t n, double* sums) {
  constexpr size_t kLanes = 8;
  double dot[kLanes] = {}, aa[kLanes] = {}, bb[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      const double x = load(a, i + l), y = load(b, i + l);
      dot[l] += x * y;
      aa[l] += x * x;
      bb[l] += y * y;
    }
  }
  for (size_t l = 0; i < n; ++i, ++l) {
    const double x = load(a, i), y = load(b, i);
    dot[l] += x * y;
    aa[l] += x * x;
    bb[l] += y * y;
  }
  for (size_t l = 0; l < kLanes; ++l) {
    sums[0] += dot[l];
    sums[1] += aa[l];
    sums[2] += bb[l];
  }
}

// out[i] = ca * a[i] + cb * b[i], in float64, rounded once to T (out may be a or b).
template <typename T>
void combine(T* out, const T* a, double ca, const T* b, double cb, size_t n) {
  for (size_t i = 0; i < n; ++i) store(out, i, ca * load(a, i) + cb * load(b, i));
}

template <typename T>
struct Typed {
  // Over this rank's window [at, at + n) of the buffer: `mine` is its own
  // values, `theirs` its peer's; `a` is always the lower rank's, so both
  // ranks of a pair compute with the same roles.
  static void dots(const std::vector<size_t>& starts, const std::vector<size_t>& counts, size_t at, size_t n,
                   const void* mine, const void* theirs, bool lower, double* sums) {
    const T* m = static_cast<const T*>(mine);
    const T* o = static_cast<const T*>(theirs);
    for (size_t k = 0; k < counts.size(); ++k) {
      const size_t from = std::max(at, starts[k]), to = std::min(at + n, starts[k] + counts[k]);
      if (from >= to) continue;
      const T* x = m + (from - at);
      const T* y = o + (from - at);
      dot_and_norms(lower ? x : y, lower ? y : x, to - from, sums + 3 * k);
    }
  }
  static void apply(const std::vector<size_t>& starts, const std::vector<size_t>& counts, size_t at, size_t n,
                    void* mine, const void* theirs, bool lower, const double* sums) {
    T* m = static_cast<T*>(mine);
    const T* o = static_cast<const T*>(theirs);
    for (size_t k = 0; k < counts.size(); ++k) {
      const size_t from = std::max(at, starts[k]), to = std::min(at + n, starts[k] + counts[k]);
      if (from >= to) continue;
      const double dot = sums[3 * k], aa = sums[3 * k + 1], bb = sums[3 * k + 2];
      const double ca = aa >= kZeroNormSquared ? 1.0 - dot / aa * 0.5 : 1.0;
      const double cb = bb >= kZeroNormSquared ? 1.0 - dot / bb * 0.5 : 1.0;
      T* x = m + (from - at);
      const T* y = o + (from - at);
      if (lower) {
        combine(x, x, ca, y, cb, to - from);
      } else {
        combine(x, y, ca, x, cb, to - from);
      }
    }
  }
};

// Sends and receives at once; a side with nothing to move posts nothing (its peer computed the same sizes).
void exchange(Transport& t, int peer, const void* out, size_t out_bytes, void* in, size_t in_bytes) {
  const int recv = in_bytes ? t.irecv(in, in_bytes, peer) : -1;
  const int send = out_bytes ? t.isend(out, out_bytes, peer) : -1;
  if (recv >= 0) t.wait(recv);
  if (send >= 0) t.wait(send);
}

}  // namespace

std::string AdasumAllreduce::unsupported(int ranks, DataType dtype) {
  if (dtype != DataType::kFloat16 && dtype != DataType::kFloat32 && dtype != DataType::kFloat64) {
    return std::string("Adasum reduces float16, float32 and float64 tensors only, not ") + dtype_name(dtype);
  }
  if (ranks < 1 || (ranks & (ranks - 1)) != 0) {
    return "Adasum needs a power-of-two number of ranks (its pairwise tree), and this process set has " +
           std::to_string(ranks);
  }
  return "";
}

void AdasumAllreduce::sum_over_group(Transport& t, int level) {
  peer_sums_.resize(sums_.size());
  const size_t bytes = sums_.size() * sizeof(double);
  for (int step = 1; step <= level; step <<= 1) {
    const int peer = t.rank() ^ step;
    exchange(t, peer, sums_.data(), bytes, peer_sums_.data(), bytes);
    // x + y on one rank, y + x on the other: the same double, so the coefficients agree everywhere.
    for (size_t i = 0; i < sums_.size(); ++i) sums_[i] += peer_sums_[i];
  }
}

void AdasumAllreduce::allreduce(Transport& t, void* buffer, const std::vector<size_t>& counts, DataType dtype) {
  const int n = t.size(), me = t.rank();
  if (n == 1) return;
  const size_t esize = dtype_size(dtype);
  char* buf = static_cast<char*>(buffer);
  std::vector<size_t> starts(counts.size());
  size_t total = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    starts[k] = total;
    total += counts[k];
  }
  received_.resize((total - total / 2) * esize);
  struct Window {
    size_t at, n;
  };
  std::vector<Window> before;  // this rank's window before each level halved it
  Window w{0, total};
  for (int level = 1; level < n; level <<= 1) {
    const int peer = me ^ level;
    const bool lower = (me & level) == 0;
    const size_t first = w.n / 2, second = w.n - first;
    const Window keep = lower ? Window{w.at, first} : Window{w.at + first, second};
    const Window give = lower ? Window{w.at + first, second} : Window{w.at, first};
    exchange(t, peer, buf + give.at * esize, give.n * esize, received_.data(), keep.n * esize);
    sums_.assign(3 * counts.size(), 0.0);
    void* mine = buf + keep.at * esize;
    switch (dtype) {
      case DataType::kFloat16:
        Typed<uint16_t>::dots(starts, counts, keep.at, keep.n, mine, received_.data(), lower, sums_.data());
        break;
      case DataType::kFloat32:
        Typed<float>::dots(starts, counts, keep.at, keep.n, mine, received_.data(), lower, sums_.data());
        break;
      default:
        Typed<double>::dots(starts, counts, keep.at, keep.n, mine, received_.data(), lower, sums_.data());
        break;
    }
    sum_over_group(t, level);
    switch (dtype) {
      case DataType::kFloat16:
        Typed<uint16_t>::apply(starts, counts, keep.at, keep.n, mine, received_.data(), lower, sums_.data());
        break;
      case DataType::kFloat32:
        Typed<float>::apply(starts, counts, keep.at, keep.n, mine, received_.data(), lower, sums_.data());
        break;
      default:
        Typed<double>::apply(starts, counts, keep.at, keep.n, mine, received_.data(), lower, sums_.data());
        break;
    }
    before.push_back(w);
    w = keep;
  }
  // Distance halving: each pair swaps the halves it finished, back up the levels.
  for (int level = n >> 1, i = static_cast<int>(before.size()) - 1; level >= 1; level >>= 1, --i) {
    const int peer = me ^ level;
    const Window whole = before[i];
    const bool lower = (me & level) == 0;
    const Window other = lower ? Window{whole.at + w.n, whole.n - w.n} : Window{whole.at, whole.n - w.n};
    exchange(t, peer, buf + w.at * esize, w.n * esize, buf + other.at * esize, other.n * esize);
    w = whole;
  }
}

}  // namespace horo
