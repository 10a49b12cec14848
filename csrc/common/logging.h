// Rank-prefixed messages on stderr, filtered by HORO_LOG_LEVEL.
#pragma once

#include <sstream>
#include <string>

namespace horo {

enum LogLevel { kLogError = 0, kLogWarning = 1, kLogInfo = 2, kLogDebug = 3 };

void set_log_context(int rank, int level);
bool log_enabled(int level);
void log_line(int level, const std::string& message);
// Also hands every printed line to `sink` (the bindings forward them to
// Python's logging, logger "horo"); null to stop.
using LogSink = void (*)(int level, const std::string& message);
void set_log_sink(LogSink sink);

}  // namespace horo

#define HORO_LOG(level, stream_expr)                   \
  do {                                                 \
    if (::horo::log_enabled(level)) {                  \
      std::ostringstream horo_log_stream_;             \
      horo_log_stream_ << stream_expr;                 \
      ::horo::log_line(level, horo_log_stream_.str()); \
    }                                                  \
  } while (0)
