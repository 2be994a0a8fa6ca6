// SPDX-License-Identifier: Apache-2.0
// Log sink: one line per message on stderr (or the installed Sink), serialized so two threads
// never interleave. A line stderr cannot take is lost, never an error.
#include "support/logging.h"

#include <cstdio>
#include <mutex>
#include <string>

namespace shapevm {

std::atomic<int> Log::threshold_{static_cast<int>(LogLevel::Warn)};
std::atomic<Log::Sink> Log::sink_{nullptr};

void Log::write(LogLevel level, std::string_view component, std::string_view message) {
  static std::mutex mutex;
  static constexpr std::string_view kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  std::lock_guard<std::mutex> lock(mutex);
  if (Sink sink = sink_.load(std::memory_order_acquire); sink != nullptr) {
    sink(level, component, message);
    return;
  }
  // Written with fwrite, whose failure (stderr on a full disk or past RLIMIT_FSIZE, a closed pipe)
  // loses the line: fmt::print would throw, and a log line must never fail the program.
  const std::string line = fmt::format("[{}] {}: {}\n", kNames[static_cast<int>(level)], component, message);
  (void)std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace shapevm
