// SPDX-License-Identifier: Apache-2.0
// The timeline: Chrome Trace Event Format events (Perfetto, chrome://tracing) from the interpreter,
// the JIT's compile threads and the AutoTuner, written as one JSON file by stop(). Invariant: when
// tracing is off every hook costs one relaxed load of a global flag and a predictable branch; when
// on, each thread appends to its own chunked buffer without a lock (the writer reads only what a
// release store published), so tracing never makes the interpreter wait for a compile thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "shapevm/status.h"

namespace shapevm::trace {

namespace detail {
extern std::atomic<bool> g_enabled;
extern std::atomic<bool> g_ops;
}  // namespace detail

// The hot-path checks.
inline bool enabled() {
  return detail::g_enabled.load(std::memory_order_relaxed);
}
inline bool opsEnabled() {
  return detail::g_ops.load(std::memory_order_relaxed);
}

// Opens `path` for writing now (an unwritable path is an error here, not at stop()) and turns
// tracing on; `ops` adds one event per op execution (--trace-ops). Errors while a trace is running.
Status start(const std::string& path, bool ops = false);
// Turns tracing off and writes every buffered event; no-op when no trace is running.
Status stop();
bool running();

// Names the calling thread (its thread_name metadata). Cheap; may be called before start().
void nameThread(std::string name);
// Names the calling thread `name` unless it already has one.
void nameThreadOnce(const char* name);

// Microseconds on the trace clock (steady_clock since the process's first trace call).
double nowUs();

// A JSON object's members, built by the caller: Args().add("pc", 14).add("signature", "MatMul").
class Args {
 public:
  Args& add(std::string_view key, std::string_view value);
  Args& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  Args& add(std::string_view key, const std::string& value) { return add(key, std::string_view(value)); }
  Args& add(std::string_view key, double value);
  Args& add(std::string_view key, std::int64_t value);
  Args& add(std::string_view key, int value) { return add(key, static_cast<std::int64_t>(value)); }
  Args& add(std::string_view key, std::uint64_t value) { return add(key, static_cast<std::int64_t>(value)); }
  Args& addPc(int pc);                               // "pc": "0x0E" (the log's form)
  const std::string& json() const { return json_; }  // the members without braces

 private:
  std::string json_;
};

// A complete ("X") event: [start_us, start_us + dur_us] on the calling thread.
void complete(const char* category, std::string name, double start_us, double dur_us, const Args& args = {});
// A complete event from `start` (a steady_clock time the caller measured) until now.
void completeSince(const char* category, std::string name, std::chrono::steady_clock::time_point start,
                   const Args& args = {});
// An instant ("i") event on the calling thread.
void instant(const char* category, std::string name, const Args& args = {});

// A complete event from construction to destruction (when tracing was on at construction).
class Scope {
 public:
  Scope(const char* category, std::string name) : category_(category), on_(enabled()) {
    if (on_) {
      name_ = std::move(name);
      start_ = nowUs();
    }
  }
  ~Scope() {
    if (on_) complete(category_, std::move(name_), start_, nowUs() - start_, args_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  Args& args() { return args_; }  // set before the scope ends
  bool on() const { return on_; }

 private:
  const char* category_;
  bool on_;
  std::string name_;
  double start_ = 0;
  Args args_;
};

}  // namespace shapevm::trace
