// SPDX-License-Identifier: Apache-2.0
// Trace buffers and the Chrome Trace Event Format writer (see trace.h). Each thread appends to
// its own list of fixed-size chunks: it fills an event, then publishes it with a release store
// of the chunk's count; stop() reads each chunk's count with an acquire load and writes what is
// published. Buffers of a finished trace stay allocated (a late writer may still hold one).
#include "support/trace.h"

#include <unistd.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "support/json_text.h"
#include "support/trace_hooks.h"

namespace shapevm::trace {

namespace detail {
std::atomic<bool> g_enabled{false};
std::atomic<bool> g_ops{false};
}  // namespace detail

namespace {

struct Event {
  char phase = 'X';
  const char* category = "";
  std::string name;
  double ts = 0, dur = 0;
  std::string args;
};

constexpr std::size_t kChunkEvents = 512;
struct Chunk {
  Event events[kChunkEvents];
  std::atomic<std::size_t> count{0};
  std::atomic<Chunk*> next{nullptr};
};

struct ThreadBuffer {
  int tid = 0;
  std::string name;
  std::unique_ptr<Chunk> head = std::make_unique<Chunk>();
  Chunk* tail = head.get();                  // the owner thread's
  std::vector<std::unique_ptr<Chunk>> more;  // owns the chunks after head (appended by the owner only)
};

struct Registry {
  std::mutex mutex;                          // registration, start and stop; never taken on the append path
  std::atomic<std::uint64_t> generation{0};  // bumped by start(): thread-local buffers of older traces are stale
  std::vector<std::unique_ptr<ThreadBuffer>> buffers;  // this trace's
  std::vector<std::unique_ptr<ThreadBuffer>> retired;  // earlier traces' (kept: see the file comment)
  std::FILE* file = nullptr;
  std::string path;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: threads may trace during exit
  return *r;
}

const std::chrono::steady_clock::time_point kOrigin = std::chrono::steady_clock::now();

struct ThreadState {
  ThreadBuffer* buffer = nullptr;
  std::uint64_t generation = 0;
  std::string name;
};
thread_local ThreadState t_state;

ThreadBuffer* threadBuffer() {
  Registry& r = registry();
  if (t_state.buffer != nullptr && t_state.generation == r.generation.load(std::memory_order_acquire))
    return t_state.buffer;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!enabled()) return nullptr;
  auto buffer = std::make_unique<ThreadBuffer>();
  buffer->tid = static_cast<int>(r.buffers.size()) + 1;
  buffer->name = t_state.name.empty() ? fmt::format("thread {}", buffer->tid) : t_state.name;
  t_state.buffer = buffer.get();
  t_state.generation = r.generation.load(std::memory_order_relaxed);
  r.buffers.push_back(std::move(buffer));
  return t_state.buffer;
}

void append(char phase, const char* category, std::string name, double ts, double dur, const std::string& args) {
  ThreadBuffer* buffer = threadBuffer();
  if (buffer == nullptr) return;
  Chunk* chunk = buffer->tail;
  std::size_t n = chunk->count.load(std::memory_order_relaxed);
  if (n == kChunkEvents) {
    auto fresh = std::make_unique<Chunk>();
    Chunk* raw = fresh.get();
    buffer->more.push_back(std::move(fresh));  // the reader walks `next`, never `more`
    chunk->next.store(raw, std::memory_order_release);
    buffer->tail = chunk = raw;
    n = 0;
  }
  Event& e = chunk->events[n];
  e.phase = phase;
  e.category = category;
  e.name = std::move(name);
  e.ts = ts;
  e.dur = dur;
  e.args = args;
  chunk->count.store(n + 1, std::memory_order_release);
}

std::string number(double value) {
  return std::isfinite(value) ? fmt::format("{:.3f}", value) : "0";
}

}  // namespace

double nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - kOrigin).count();
}

Args& Args::add(std::string_view key, std::string_view value) {
  if (!json_.empty()) json_ += ',';
  appendJsonString(json_, key);
  json_ += ':';
  appendJsonString(json_, value);
  return *this;
}

Args& Args::add(std::string_view key, double value) {
  if (!json_.empty()) json_ += ',';
  appendJsonString(json_, key);
  json_ += ':' + number(value);
  return *this;
}

Args& Args::add(std::string_view key, std::int64_t value) {
  if (!json_.empty()) json_ += ',';
  appendJsonString(json_, key);
  json_ += ':' + std::to_string(value);
  return *this;
}

Args& Args::addPc(int pc) {
  return add("pc", std::string_view(fmt::format("0x{:02X}", pc)));
}

void complete(const char* category, std::string name, double start_us, double dur_us, const Args& args) {
  if (!enabled()) return;
  append('X', category, std::move(name), start_us, dur_us < 0 ? 0 : dur_us, args.json());
}

void completeSince(const char* category, std::string name, std::chrono::steady_clock::time_point start,
                   const Args& args) {
  if (!enabled()) return;
  const double dur = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  complete(category, std::move(name), nowUs() - dur, dur, args);
}

void instant(const char* category, std::string name, const Args& args) {
  if (!enabled()) return;
  append('i', category, std::move(name), nowUs(), 0, args.json());
}

void nameThread(std::string name) {
  t_state.name = std::move(name);
  if (enabled()) {
    ThreadBuffer* buffer = threadBuffer();
    std::lock_guard<std::mutex> lock(registry().mutex);
    if (buffer != nullptr) buffer->name = t_state.name;
  }
}

void nameThreadOnce(const char* name) {
  if (t_state.name.empty()) nameThread(name);
}

bool running() {
  std::lock_guard<std::mutex> lock(registry().mutex);
  return registry().file != nullptr;
}

Status start(const std::string& path, bool ops) {
  if (!SHAPEVM_TRACE_HOOKS) {
    return makeError(ErrorCode::Unsupported,
                     "this shapevm was built with SHAPEVM_TRACE_HOOKS=OFF (the trace hooks compiled out): it "
                     "cannot write a trace");
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.file != nullptr) {
    return makeError(ErrorCode::InvalidArgument, "a trace is already being written to '{}'", r.path);
  }
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return makeError(ErrorCode::IoError, "cannot open trace file '{}' for writing", path);
  }
  r.file = file;
  r.path = path;
  r.generation.fetch_add(1, std::memory_order_release);
  for (auto& buffer : r.buffers) r.retired.push_back(std::move(buffer));
  r.buffers.clear();
  detail::g_ops.store(ops, std::memory_order_relaxed);
  detail::g_enabled.store(true, std::memory_order_release);
  // The starting thread is usually the interpreter's.
  if (t_state.name.empty()) t_state.name = "interpreter";
  return Status::ok();
}

Status stop() {
  Registry& r = registry();
  detail::g_enabled.store(false, std::memory_order_seq_cst);
  detail::g_ops.store(false, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.file == nullptr) return Status::ok();
  const int pid = static_cast<int>(::getpid());
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  out += fmt::format(
      "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":\"shapevm\"}}}}", pid);
  for (const auto& buffer : r.buffers) {
    out += fmt::format(",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":", pid,
                       buffer->tid);
    appendJsonString(out, buffer->name);
    out += "}}";
    for (const Chunk* chunk = buffer->head.get(); chunk != nullptr;
         chunk = chunk->next.load(std::memory_order_acquire)) {
      const std::size_t n = chunk->count.load(std::memory_order_acquire);
      for (std::size_t i = 0; i < n; ++i) {
        const Event& e = chunk->events[i];
        out += ",\n{\"name\":";
        appendJsonString(out, e.name);
        out += fmt::format(",\"cat\":\"{}\",\"ph\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{}", e.category, e.phase, pid,
                           buffer->tid, number(e.ts));
        if (e.phase == 'X') out += ",\"dur\":" + number(e.dur);
        if (e.phase == 'i') out += ",\"s\":\"t\"";
        out += ",\"args\":{" + e.args + "}}";
      }
    }
  }
  out += "\n]}\n";
  const bool written = std::fwrite(out.data(), 1, out.size(), r.file) == out.size();
  const bool closed = std::fclose(r.file) == 0;
  r.file = nullptr;
  if (!written || !closed) return makeError(ErrorCode::IoError, "failed writing trace file '{}'", r.path);
  return Status::ok();
}

}  // namespace shapevm::trace
