#include "common/logging.h"

#include <atomic>
#include <cstdio>

namespace horo {

namespace {
int g_rank = -1;
int g_level = kLogWarning;
const char* kNames[] = {"ERROR", "WARNING", "INFO", "DEBUG"};
std::atomic<LogSink> g_sink{nullptr};
}  // namespace

void set_log_context(int rank, int level) {
  g_rank = rank;
  g_level = level;
}

bool log_enabled(int level) { return level <= g_level; }

void log_line(int level, const std::string& message) {
  std::fprintf(stderr, "[horo %s rank %d] %s\n", kNames[level], g_rank, message.c_str());
  std::fflush(stderr);
  if (LogSink sink = g_sink.load()) sink(level, message);
}

void set_log_sink(LogSink sink) { g_sink = sink; }

}  // namespace horo
