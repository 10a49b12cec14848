#include "engine/timeline.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/error.h"
#include "common/logging.h"

namespace horo {

namespace {

const char* op_label(CollectiveType type) {
  switch (type) {
    case CollectiveType::kAllreduce: return "ALLREDUCE";
    case CollectiveType::kBroadcast: return "BROADCAST";
    case CollectiveType::kAllgather: return "ALLGATHER";
    case CollectiveType::kAlltoall: return "ALLTOALL";
    case CollectiveType::kReducescatter: return "REDUCESCATTER";
    case CollectiveType::kBarrier: return "BARRIER";
    case CollectiveType::kGather: return "GATHER";
    case CollectiveType::kScatter: return "SCATTER";
    case CollectiveType::kReduce: return "REDUCE";
    case CollectiveType::kAddProcessSet: return "ADD_PROCESS_SET";
    case CollectiveType::kRemoveProcessSet: return "REMOVE_PROCESS_SET";
    case CollectiveType::kJoin: return "JOIN";
  }
  return "UNKNOWN";
}

const char* negotiate_label(CollectiveType type) {
  switch (type) {
    case CollectiveType::kAllreduce: return "NEGOTIATE_ALLREDUCE";
    case CollectiveType::kBroadcast: return "NEGOTIATE_BROADCAST";
    case CollectiveType::kAllgather: return "NEGOTIATE_ALLGATHER";
    case CollectiveType::kAlltoall: return "NEGOTIATE_ALLTOALL";
    case CollectiveType::kReducescatter: return "NEGOTIATE_REDUCESCATTER";
    case CollectiveType::kBarrier: return "NEGOTIATE_BARRIER";
    case CollectiveType::kGather: return "NEGOTIATE_GATHER";
    case CollectiveType::kScatter: return "NEGOTIATE_SCATTER";
    case CollectiveType::kReduce: return "NEGOTIATE_REDUCE";
    case CollectiveType::kAddProcessSet: return "NEGOTIATE_ADD_PROCESS_SET";
    case CollectiveType::kRemoveProcessSet: return "NEGOTIATE_REMOVE_PROCESS_SET";
    case CollectiveType::kJoin: return "NEGOTIATE_JOIN";
  }
  return "NEGOTIATE";
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

// Writer: hands over at this many events even before the next tick.
constexpr size_t kBatchEvents = 1 << 14;
constexpr auto kWriteInterval = std::chrono::milliseconds(200);

}  // namespace

// ---------------------------------------------------------------- caller threads

void Timeline::start(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> control(control_);
  close();  // replaces a running timeline
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw Error("cannot open the timeline file '" + path + "': " + std::strerror(errno));
  std::fputs("[\n", f);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    file_ = f;
    first_event_ = true;
    closing_ = false;
    pending_.clear();
    pending_rows_.clear();
    mark_cycles_ = mark_cycles;
    origin_ = Clock::now();
  }
  writer_ = std::thread([this] { write_loop(); });
  session_.fetch_add(1, std::memory_order_release);
  active_.store(true, std::memory_order_release);
}

void Timeline::stop() {
  std::lock_guard<std::mutex> control(control_);
  close();
}

void Timeline::close() {
  if (file_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;  // later flushes are dropped
  }
  active_.store(false, std::memory_order_release);
  writer_cv_.notify_one();
  writer_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

// ---------------------------------------------------------------- background thread

bool Timeline::active() {
  if (!active_.load(std::memory_order_acquire)) return false;
  const uint64_t session = session_.load(std::memory_order_acquire);
  if (session != seen_session_) {
    seen_session_ = session;
    local_.clear();
    new_rows_.clear();
    rows_.clear();
    first_cycle_.clear();
    group_.clear();
    group_label_ = nullptr;
    new_rows_.emplace_back(0, "(engine cycles)");
  }
  return true;
}

namespace {
std::string row_key(int set_id, const std::string& name) {
  return name + " [process set " + std::to_string(set_id) + "]";
}
}  // namespace

Timeline::Row* Timeline::find_row(int set_id, const std::string& name) {
  // The global set's rows are keyed by the bare name: no key to build on the common path.
  auto it = set_id == 0 ? rows_.find(name) : rows_.find(row_key(set_id, name));
  return it == rows_.end() ? nullptr : &it->second;
}

Timeline::Row& Timeline::row(int set_id, const std::string& name) {
  if (Row* found = find_row(set_id, name)) return *found;
  const std::string key = set_id == 0 ? name : row_key(set_id, name);
  Row& r = rows_[key];
  r.id = static_cast<int>(rows_.size());  // row 0 is the cycle marks
  new_rows_.emplace_back(r.id, key);
  return r;
}

void Timeline::negotiation_started(int set_id, const Request& request, Clock::time_point enqueued_at,
                                   int64_t now) {
  if (now < 0 || !active()) return;
  Row& r = row(set_id, request.name);
  // Enqueued before the timeline started, or unrecorded: the queue phase starts now.
  const int64_t queued = enqueued_at == Clock::time_point{} ? now : std::max<int64_t>(0, to_us(enqueued_at));
  span(r, "QUEUE", std::min(queued, now), now);
  r.state = State::kFirstCycle;
  r.set_id = set_id;
  r.type = request.type;
  r.since = now;
  first_cycle_.push_back(&r);
}

void Timeline::cycle_finished(int set_id, const std::vector<Response>& responses) {
  if (!active()) return;
  const int64_t now = now_us();
  for (const Response& response : responses) {
    Row* found = find_row(set_id, response.request.name);
    if (found == nullptr) continue;
    Row& r = *found;
    if (r.state == State::kFirstCycle) span(r, negotiate_label(r.type), r.since, now);
    if (r.state == State::kWaiting) span(r, "WAIT_FOR_OTHER_RANKS", r.since, now);
    r.state = State::kIdle;
  }
  // Those still in their first cycle were not ready everywhere: they wait now.
  size_t keep = 0;
  for (Row* r : first_cycle_) {
    if (r->set_id != set_id) {
      first_cycle_[keep++] = r;
    } else if (r->state == State::kFirstCycle) {
      span(*r, negotiate_label(r->type), r->since, now);
      r->state = State::kWaiting;
      r->since = now;
    }
  }
  first_cycle_.resize(keep);
}

void Timeline::group_started(int set_id, const std::vector<Response>& group) {
  group_.clear();
  group_label_ = nullptr;
  if (!active()) return;
  for (const Response& response : group) group_.push_back(&row(set_id, response.request.name));
  group_label_ = op_label(group.front().request.type);
  group_start_ = now_us();
}

void Timeline::group_finished(bool failed) {
  if (group_label_ == nullptr || !active()) return;
  const int64_t now = now_us();
  const int64_t tensors = static_cast<int64_t>(group_.size());
  for (Row* r : group_) span(*r, failed ? "ERROR" : group_label_, group_start_, now, tensors);
  group_.clear();
  group_label_ = nullptr;
}

void Timeline::activity(const char* label, int64_t start_us) {
  if (start_us < 0 || group_label_ == nullptr || !active()) return;
  const int64_t now = now_us();
  for (Row* r : group_) span(*r, label, start_us, now);
}

void Timeline::mark_cycle(int64_t start_us, int64_t responses) {
  if (start_us < 0 || !mark_cycles_ || !active()) return;
  local_.push_back(Event{start_us, 0, 0, 'i', "CYCLE_START", responses});
}

void Timeline::flush() {
  if (local_.empty() && new_rows_.empty()) return;
  bool wake_writer = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Events of an earlier session (stopped since) are dropped, not written to the next file.
    if (file_ != nullptr && !closing_ && seen_session_ == session_.load(std::memory_order_relaxed)) {
      pending_rows_.insert(pending_rows_.end(), std::make_move_iterator(new_rows_.begin()),
                           std::make_move_iterator(new_rows_.end()));
      pending_.insert(pending_.end(), local_.begin(), local_.end());
      wake_writer = pending_.size() >= kBatchEvents;
    }
  }
  local_.clear();
  new_rows_.clear();
  if (wake_writer) writer_cv_.notify_one();
}

// ---------------------------------------------------------------- writer thread

void Timeline::write_loop() {
  std::vector<Event> events;
  std::vector<std::pair<int, std::string>> rows;
  for (;;) {
    bool done;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      writer_cv_.wait_for(lock, kWriteInterval, [&] { return closing_ || pending_.size() >= kBatchEvents; });
      events.swap(pending_);
      rows.swap(pending_rows_);
      done = closing_;
    }
    write_batch(events, rows);
    if (done) return;
  }
}

void Timeline::write_batch(std::vector<Event>& events, std::vector<std::pair<int, std::string>>& rows) {
  if (events.empty() && rows.empty()) return;
  std::string out;
  out.reserve(rows.size() * 160 + events.size() * 96);
  auto next = [&] {
    if (!first_event_) out += ",\n";
    first_event_ = false;
  };
  // Metadata first: names the rows (trace "processes") and keeps them in order of appearance.
  for (const auto& [id, name] : rows) {
    next();
    out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(id) + ",\"args\":{\"name\":";
    append_json_string(out, name);
    out += "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(id) +
           ",\"args\":{\"sort_index\":" + std::to_string(id) + "}}";
    if (id == 0 && !topology_.empty()) {
      out += ",\n{\"name\":\"process_labels\",\"ph\":\"M\",\"pid\":0,\"args\":{\"labels\":";
      append_json_string(out, topology_);
      out += "}}";
    }
  }
  auto number = [&](int64_t v) {
    char buf[24];
    out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  };
  for (const Event& e : events) {
    next();
    out += "{\"name\":\"";
    out += e.label;
    out += e.phase == 'X' ? "\",\"ph\":\"X\",\"ts\":" : "\",\"ph\":\"i\",\"s\":\"g\",\"ts\":";
    number(e.ts);
    if (e.phase == 'X') {
      out += ",\"dur\":";
      number(e.dur);
    }
    out += ",\"pid\":";
    number(e.row);
    out += ",\"tid\":0";
    if (e.arg >= 0) {
      out += e.phase == 'X' ? ",\"args\":{\"tensors\":" : ",\"args\":{\"responses\":";
      number(e.arg);
      out += '}';
    }
    out += '}';
  }
  if (std::fwrite(out.data(), 1, out.size(), file_) != out.size()) {
    HORO_LOG(kLogWarning, "timeline: writing failed: " << std::strerror(errno));
  }
  std::fflush(file_);
  events.clear();
  rows.clear();
}

}  // namespace horo
