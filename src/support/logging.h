// SPDX-License-Identifier: Apache-2.0
// Leveled logging to stderr in the spec's form: "[INFO] JIT: Hot path detected at PC=0x0A, ...".
// A component ("JIT", "VM") is enabled by one switch; messages are formatted only when enabled.
#pragma once

#include <atomic>
#include <string_view>

#include <fmt/format.h>

namespace shapevm {

enum class LogLevel : std::uint8_t { Debug, Info, Warn, Error };

class Log {
 public:
  static bool enabled(LogLevel level) { return static_cast<int>(level) >= threshold_.load(std::memory_order_relaxed); }
  static void setThreshold(LogLevel level) { threshold_.store(static_cast<int>(level), std::memory_order_relaxed); }
  static void write(LogLevel level, std::string_view component, std::string_view message);
  // Where write() sends lines: nullptr (the default) = stderr. A sink may be called from any
  // thread (the JIT's compile threads too), one call at a time; it must not log itself.
  using Sink = void (*)(LogLevel level, std::string_view component, std::string_view message);
  static void setSink(Sink sink) { sink_.store(sink, std::memory_order_release); }

 private:
  static std::atomic<int> threshold_;
  static std::atomic<Sink> sink_;
};

template <typename... Args>
void logAt(LogLevel level, std::string_view component, fmt::format_string<Args...> format, Args&&... args) {
  if (Log::enabled(level)) Log::write(level, component, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace shapevm
