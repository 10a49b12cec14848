#include "wire/messages.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "common/error.h"

namespace horo {

int64_t Request::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool Response::answers(const Request& q, int rank, int size) const {
  const Request& p = request;
  if (q.type != p.type || q.dtype != p.dtype || q.op != p.op || q.prescale != p.prescale ||
      q.postscale != p.postscale || q.root != p.root || q.name != p.name || q.memory != p.memory ||
      (q.type != CollectiveType::kAlltoall && q.splits != p.splits)) {
    return false;
  }
  const bool gathers = q.type == CollectiveType::kAllgather || q.type == CollectiveType::kGather;
  if (gathers || q.type == CollectiveType::kAlltoall) {
    if (q.shape.size() != p.shape.size() || q.shape.empty()) return false;
    if (!std::equal(q.shape.begin() + 1, q.shape.end(), p.shape.begin() + 1)) return false;
    if (gathers) {
      return static_cast<int>(per_rank.size()) == size && per_rank[rank] == q.shape[0];
    }
    return static_cast<int>(per_rank.size()) == size * size &&
           std::equal(q.splits.begin(), q.splits.end(), per_rank.begin() + rank * size) &&
           static_cast<int>(q.splits.size()) == size;
  }
  return q.shape == p.shape;
}

std::string Request::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

class Writer {
 public:
  template <typename T>
  void put(T value) {
    out_.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void put_request(const Request& q) {
    put(q.rank);
    put(q.type);
    put(q.dtype);
    put(q.op);
    put(q.prescale);
    put(q.postscale);
    put_ints(q.shape);
    put_string(q.name);
    put(q.process_set);
    put(q.root);
    put_ints(q.splits);
    put_string(q.rejection);
    put(q.memory);
  }
  void put_ints(const std::vector<int64_t>& v) {
    put<uint32_t>(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) put(x);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  bool done() const { return pos_ == in_.size(); }
  template <typename T>
  T get() {
    if (sizeof(T) > remaining()) throw Error("corrupt control message: truncated");
    T value;
    std::memcpy(&value, in_.data() + pos_, sizeof value);
    pos_ += sizeof value;
    return value;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    if (n > remaining()) throw Error("corrupt control message: string longer than the message");
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  Request get_request() {
    Request q;
    q.rank = get<int32_t>();
    q.type = get_enum<CollectiveType>(kNumCollectiveTypes, "collective");
    q.dtype = get_enum<DataType>(kNumDataTypes, "dtype");
    q.op = get_enum<ReduceOp>(static_cast<int>(ReduceOp::kProduct) + 1, "reduction op");
    if (!op_valid(static_cast<int>(q.op))) throw Error("corrupt control message: unsupported reduction op");
    q.prescale = get<double>();
    q.postscale = get<double>();
    q.shape = get_ints();
    q.name = get_string();
    q.process_set = get<int32_t>();
    q.root = get<int32_t>();
    q.splits = get_ints();
    q.rejection = get_string();
    q.memory = get<Memory>();
    if (q.memory != Memory::kHost && q.memory != Memory::kCuda) throw Error("corrupt control message");
    return q;
  }
  // The count is checked against the bytes left before anything is
  // allocated: a hostile length cannot make us reserve gigabytes.
  std::vector<int64_t> get_ints() {
    const uint32_t n = get<uint32_t>();
    if (n > remaining() / sizeof(int64_t)) throw Error("corrupt control message: list longer than the message");
    std::vector<int64_t> v(n);
    for (auto& x : v) x = get<int64_t>();
    return v;
  }
  // Enums arrive as their underlying byte; a value outside the enum would
  // index tables out of bounds later on.
  template <typename E>
  E get_enum(int count, const char* what) {
    const auto raw = get<std::underlying_type_t<E>>();
    if (static_cast<int>(raw) >= count) {
      throw Error(std::string("corrupt control message: unknown ") + what + " " + std::to_string(raw));
    }
    return static_cast<E>(raw);
  }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace

std::string encode_requests(const std::vector<Request>& requests) {
  Writer w;
  for (const auto& q : requests) w.put_request(q);
  return w.take();
}

std::vector<Request> decode_requests(const std::string& bytes) {
  Reader r(bytes);
  std::vector<Request> out;
  while (!r.done()) out.push_back(r.get_request());
  return out;
}

std::string encode_responses(const std::vector<Response>& responses) {
  Writer w;
  for (const auto& p : responses) {
    w.put(p.kind);
    w.put_request(p.request);
    w.put_string(p.error);
    w.put_ints(p.per_rank);
  }
  return w.take();
}

std::vector<Response> decode_responses(const std::string& bytes) {
  Reader r(bytes);
  std::vector<Response> out;
  while (!r.done()) {
    Response p;
    p.kind = r.get_enum<Response::Kind>(2, "response kind");
    p.request = r.get_request();
    p.error = r.get_string();
    p.per_rank = r.get_ints();
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace horo
