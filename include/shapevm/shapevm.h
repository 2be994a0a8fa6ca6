// SPDX-License-Identifier: Apache-2.0
// ShapeVM's public C++ API: a Session loads one program (.py / .svasm / .svm / .onnx, from a file or
// from source text), lists its functions, runs them on Tensors and scalars (Values) and reports
// statistics; the tiered JIT and, at O2, the AutoTuner work behind it. Invariant: nothing here
// aborts or throws; every failure comes back as a Status (shapevm/status.h) naming what, where
// and the shapes involved. The header exposes no LLVM and no internal header (pimpl).
//
// Settings. ShapeVM's thresholds live in ONE process-wide table (`shapevm tunables` lists it).
// Session::set() and Session::get() mean this, and no more:
//   * "jit_level" (O0/O1/O2, or 0/1/2) belongs to the Session: a new Session starts at the
//     table's jit_level row (default 2); set() re-attaches this Session's JIT at once, and other
//     Sessions are not affected.
//   * every other key writes the process-wide row: it affects every Session in the process,
//     including those already running (the interpreter and the JIT read most rows live; a few —
//     compile_threads, jit_gdb, jit_perf — are read when a Session's JIT attaches, i.e. at load()
//     and at a jit_level change). setTunable()/getTunable() are the same rows without a Session.
// The $SHAPEVM_* environment variables reach the table only through
// loadTunablesFromEnvironment() (the CLI calls it first). Per-Session choices that are not
// tunables (profiling, waiting for compiles, the tuning database) are SessionOptions, fixed
// when the Session is made.
//
// Threads. All methods may be called from any thread. run() calls on one Session are serialized
// (the JIT's compile thread keeps working meanwhile); different Sessions run in parallel.
// A Session may be destroyed while its compiles are in flight (they are stopped first).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shapevm/dtype.h"
#include "shapevm/status.h"
#include "shapevm/tensor.h"
#include "shapevm/value.h"

namespace shapevm {

// Fixed when a Session is made.
struct SessionOptions {
  bool profile = true;               // per-site timing and shape profiles (the JIT compiles from them;
                                     // false = everything runs interpreted)
  bool jit_wait = false;             // each run() waits for the compiles it queued (reproducible tier-up)
  bool autotune = true;              // O2: time each kernel's candidates (the AutoTuner); false = defaults
  bool tuning_cache = true;          // O2: read and append the tuning database (false = --no-cache)
  std::string tuning_db;             // its file; "" = $SHAPEVM_CACHE_DIR/tuning.jsonl (or ~/.cache/shapevm)
  std::int64_t tune_budget_ms = -1;  // per kernel; -1 = the tune_budget_ms tunable
};

// How load()/loadSource() read a program.
enum class SourceKind : std::uint8_t {
  Auto,    // by the file name's extension (.py / .svasm / .svm / .onnx); source text without one:
           // .svasm when it starts with `.module`, else Python
  Python,  // the strict Python subset (the frontend)
  Svasm,   // bytecode assembly text
  Onnx,    // an ONNX model (ModelProto bytes), imported (docs/onnx.md); needs the ONNX build
};

struct LoadOptions {
  SourceKind kind = SourceKind::Auto;
  // Python only: compile only this function (a name, `Class.method`, or a unique method name) and
  // what it calls; "" = every function.
  std::string entry;
  // Python only: frontend optimizations, a list of dce,reshape,addn,fold; "all" or "none".
  std::string optimizations = "all";
  // loadSource() only: the name errors and the line table use (and whose extension Auto reads).
  std::string filename = "<source>";
};

// One dim of a parameter's shape token.
struct DimInfo {
  std::int64_t size = -1;  // the static extent; -1 = dynamic
  std::string name;        // a dynamic dim's name ("batch"), "?N" for an unnamed id, "" anonymous/static
  std::int64_t lo = -1;    // a dynamic dim's range, -1 = unbounded
  std::int64_t hi = -1;
};

struct ParamInfo {
  std::string name;
  ValueKind kind = ValueKind::Tensor;  // Tensor, Int, Float or Bool
  std::string token;                   // the shape token as text: "f32[?0,128]" ("" for scalars)
  std::optional<DType> dtype;          // nullopt = any dtype (or a scalar)
  bool any_rank = false;               // `[*]`: any rank; dims is empty
  std::vector<DimInfo> dims;
};

struct FunctionInfo {
  int index = 0;
  std::string name;  // "lstm_cell", "Cell.construct"
  std::vector<ParamInfo> params;
  int num_outputs = 0;
};

struct SessionStats {
  std::uint64_t runs = 0;                   // run() calls that reached the interpreter
  std::uint64_t launches_compiled = 0;      // op executions served by JIT-compiled kernels
  std::uint64_t launches_interpreted = 0;   // op executions that ran a reference kernel
  std::uint64_t kernels_installed = 0;      // kernels the JIT installed
  double compile_ms = 0;                    // end-to-end compile time of those kernels, summed
  std::uint64_t allocations_requested = 0;  // tensor allocations asked of the caching allocator
  std::uint64_t allocations_system = 0;     // ... of which reached the system allocator
  std::uint64_t instructions = 0;           // bytecode instructions executed
  std::uint64_t guard_misses = 0;           // compiled sites whose guards rejected the shapes
  std::uint64_t compile_failures = 0;       // codegen failures and validation rejections
  std::uint64_t fused_regions = 0;          // O2 fused ranges installed
  double tuning_ms = 0;                     // AutoTuner time, summed
  std::uint64_t kernels_from_cache = 0;     // kernels whose code came from the compiled-kernel cache
  std::uint64_t codegen_count = 0;          // LLVM code generations the JIT ran
  std::uint64_t compiles_pending = 0;       // compiles/tunings still queued or running: compile and tuning figures
                                            // are not final (a background tune is in progress)
  int jit_level = 0;                        // the level the JIT runs at (0 when none is attached)
  std::string jit_report;                   // the JIT's report (what `shapevm run --stats` prints); "" at O0
};

// What Session::exportCache / importCache copied.
struct CacheTransfer {
  int kernels = 0;         // compiled kernels (each checked: checksum, key)
  int tuning_records = 0;  // tuning-database records the destination did not have
};

// Session::warmStart: a limit and a way to stop it from another thread.
struct WarmStartOptions {
  std::int64_t timeout_ms = 0;                // stop after this long (0 = no limit); the rest is left to first sight
  const std::atomic<bool>* cancel = nullptr;  // set from another thread to stop early
};

// What Session::warmStart did with one site or fused range the install records list.
struct WarmStartEntry {
  std::string function;
  std::string kind;     // "region" (a fused range) or "site" (one op's kernel)
  int pc = 0;           // its (first) CallOp
  std::string outcome;  // "installed", "declined" (cannot be rebuilt here), "failed" (compile or validation), "skipped"
  std::string reason;   // why; for an installed one, what was installed
  std::uint64_t codegens = 0;  // LLVM code generations it needed (0: the code came from the kernel cache)
};

struct WarmStartResult {
  int installed = 0, declined = 0, failed = 0, skipped = 0;
  std::uint64_t codegens = 0;  // summed over entries: 0 when the cache covered everything
  bool timed_out = false, cancelled = false;
  double wall_ms = 0, cpu_ms = 0;  // cpu_ms: the compiles' CPU, their helper threads included
  std::string note;                // nothing to do (O0, no kernel cache, a cold cache): why
  std::vector<WarmStartEntry> entries;
  std::string summary() const;  // one line: counts, codegens, time, the note
};

class Session {
 public:
  explicit Session(SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // ---- settings (see the top of this file for what is per Session and what is process-wide) ----
  // `key` is a tunable's snake_case key or CamelCase name; a bad key lists the known ones, a bad
  // value names the key and its valid range. jit_level also accepts O0/O1/O2.
  Status set(std::string_view key, std::string_view value);
  Status set(std::string_view key, std::int64_t value);
  Expected<std::int64_t> get(std::string_view key) const;
  struct Setting {
    std::string key;
    std::int64_t value = 0;
    std::int64_t default_value = 0;
    std::string env;  // the environment variable that sets it
    std::string meaning;
  };
  // Every row of the table, with this Session's jit_level.
  std::vector<Setting> settings() const;

  // The process-wide table without a Session (jit_level here = the level new Sessions start at).
  static Status setTunable(std::string_view key, std::string_view value);
  static Expected<std::int64_t> getTunable(std::string_view key);
  // Applies $SHAPEVM_* variables to the table (a malformed one is an error naming it).
  static Status loadTunablesFromEnvironment();
  // Whether this build has the JIT (SHAPEVM_ENABLE_JIT); without it jit_level >= 1 is an error.
  static bool jitAvailable();

  // ---- the program ----
  // Reads, compiles (Python) or assembles, and verifies a program, replacing any loaded one, then
  // attaches the JIT at this Session's jit_level. A JIT that cannot start is not an error (runs
  // stay interpreted); jitStatus() says why.
  Status load(const std::string& path, const LoadOptions& options = {});
  Status loadSource(std::string_view source, const LoadOptions& options = {});
  bool loaded() const;
  // Ok when the JIT runs at the requested level or O0 was asked for; else why it does not.
  Status jitStatus() const;
  // Writes the loaded module (.svm binary or .svasm text, by extension) as the JIT left it: shape
  // tokens rewritten to the ranges it compiled for.
  Status save(const std::string& path) const;

  std::vector<FunctionInfo> functions() const;
  // By name: exact, then a unique method name (`construct` for `Cell.construct`); "" = the only
  // function, `main`, or a unique `*.construct`. The error lists the functions there are.
  Expected<FunctionInfo> function(std::string_view name) const;

  // ---- running ----
  // Runs a function with arguments matched to its parameters by position: Value::fromTensor(t),
  // Value::fromInt/fromFloat/fromBool. Outputs come back in order (tuples as Tuple values).
  // Wrong counts, kinds, dtypes or shapes are errors naming the parameter and both shapes.
  Expected<std::vector<Value>> run(std::string_view function, std::span<const Value> args);
  Expected<std::vector<Value>> run(int function, std::span<const Value> args);
  // Blocks until no compile is queued or running (no-op without a JIT).
  void waitIdle();
  // Synchronous warm start, meant before the first call: installs every site and fused range the
  // kernel cache's install records list for this program (what an earlier process or an imported
  // `cache export` archive compiled), compiling on the calling thread from the cached code and
  // tuning database; each install is validated as usual, and what is declined or fails (named in
  // the result) is left to the usual tier-up. Nothing to do (O0, no cache, a cold cache) is an ok
  // result with a note; the only error is no loaded program.
  Expected<WarmStartResult> warmStart(const WarmStartOptions& options = {});
  SessionStats stats() const;
  // Every figure of stats() and `shapevm run --stats`, plus latency per argument shape, as one JSON
  // object whose keys docs/observability.md documents (Python's stats() returns the same keys).
  std::string statsJson() const;
  Status writeStatsJson(const std::string& path) const;

  // ---- the timeline (process-wide; docs/observability.md) ----
  // Starts a Chrome Trace Event Format trace of every Session's interpreter and compile threads:
  // `path` is opened now (an unwritable path is an error here, not at the end); `ops` adds one
  // event per op execution. stopTrace() writes the file. Off, tracing costs one predictable branch.
  static Status startTrace(const std::string& path, bool ops = false);
  static Status stopTrace();

  // ---- the compiled-kernel cache and tuning database (process-wide; docs/scale-out.md) ----
  // exportCache copies every valid kernel of the cache directory `cache_dir` ("" = the default:
  // $SHAPEVM_CACHE_DIR, else ~/.cache/shapevm) to DIR/kernels and merges its tuning records into
  // DIR/tuning.jsonl: an archive that other machines, replicas or workers import, so they install
  // kernels without compiling. importCache copies such an archive into `cache_dir`. Entries that
  // fail their checks are skipped with a warning; an entry from another CPU, LLVM or ShapeVM is
  // copied but never loaded (the cache key names them), so it is compiled fresh there.
  static Expected<CacheTransfer> exportCache(const std::string& dir, const std::string& cache_dir = "");
  static Expected<CacheTransfer> importCache(const std::string& dir, const std::string& cache_dir = "");

 private:
  friend struct SessionAccess;  // the CLI and the bench read the parts (src/session/session_access.h)
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shapevm
