// SPDX-License-Identifier: Apache-2.0
// oneDNN convolution primitives for the conv family's library candidate (see
// library_onednn_conv.h): the problem a call poses, the primitive cache, the runner and the
// direct fallback loop.
#include "jit/llvm_cpu/library_onednn_conv.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <oneapi/dnnl/dnnl.h>

#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/library_cache.h"
#include "jit/llvm_cpu/library_onednn.h"
#include "jit/llvm_cpu/matmul_plan.h"
#include "ops/conv_geometry.h"
#include "support/cpu_cores.h"
#include "support/logging.h"

namespace shapevm::jit::onednn_conv {

namespace {

// Primitives kept at most (one per call shape seen; never evicted: prepared calls point at them).
constexpr std::size_t kMaxPrimitives = 512;
// Conv attributes in schema order (ops.def) and its operands: x, w, the bias, then the
// epilogue's operands (codegen_conv.cc).
constexpr std::size_t kStrides = 0, kPads = 1, kDilations = 2, kGroups = 3, kAutoPad = 4;
constexpr std::size_t kX = 0, kW = 1, kBias = 2;

struct PostOpKind {
  OpId op;
  bool binary;
  dnnl_alg_kind_t alg;
  float alpha;
};
// The epilogue ops a post-op expresses (the conv family's fusable ones that oneDNN has).
constexpr PostOpKind kPostOps[] = {
    {OpId::Relu, false, dnnl_eltwise_relu, 0.f},
    {OpId::Tanh, false, dnnl_eltwise_tanh, 0.f},
    {OpId::Sigmoid, false, dnnl_eltwise_logistic, 0.f},
    {OpId::Silu, false, dnnl_eltwise_swish, 1.f},
    {OpId::Gelu, false, dnnl_eltwise_gelu_erf, 0.f},
    {OpId::Add, true, dnnl_binary_add, 0.f},
    {OpId::Sub, true, dnnl_binary_sub, 0.f},
    {OpId::Mul, true, dnnl_binary_mul, 0.f},
    {OpId::Maximum, true, dnnl_binary_max, 0.f},
    {OpId::Minimum, true, dnnl_binary_min, 0.f},
};

const PostOpKind* postOpOf(OpId op) {
  for (const PostOpKind& kind : kPostOps) {
    if (kind.op == op) return &kind;
  }
  return nullptr;
}

using library::check;

// One element: every dim 1 (a scalar bound such as ReLU6's).
bool oneElement(const OperandSpec& operand) {
  for (int d = 0; d < operand.rank; ++d) {
    if (!operand.dims[d].isStatic() || operand.dims[d].size != 1) return false;
  }
  return true;
}

// oneDNN's data type of a float dtype the candidate takes.
dnnl_data_type_t dnnlType(DType dtype) {
  switch (dtype) {
    case DType::BFloat16: return dnnl_bf16;
    case DType::Float16: return dnnl_f16;
    default: return dnnl_f32;
  }
}

// Element i of `data` (float32, float16 or bfloat16) as float32, and `v` stored there rounded once.
float loadAt(const void* data, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::BFloat16: return bf16ToFloat(static_cast<const std::uint16_t*>(data)[i]);
    case DType::Float16: return halfToFloat(static_cast<const std::uint16_t*>(data)[i]);
    default: return static_cast<const float*>(data)[i];
  }
}
void storeAt(void* data, DType dtype, std::int64_t i, float v) {
  switch (dtype) {
    case DType::BFloat16: static_cast<std::uint16_t*>(data)[i] = floatToBf16(v); break;
    case DType::Float16: static_cast<std::uint16_t*>(data)[i] = floatToHalf(v); break;
    default: static_cast<float*>(data)[i] = v; break;
  }
}

// The conv a call poses: what the cache is keyed by (toString) and the runner reads.
struct Problem {
  DType dtype = DType::Float32;  // of x, w, the bias and the output
  int spatial = 2;
  std::int64_t n = 0, cin = 0, cout = 0, groups = 1;
  std::vector<std::int64_t> in, kernel, out, strides, dilations, pad_l, pad_r;
  bool bias = false;
  struct Post {
    OpId op;
    int operand = -1;  // binary: the KernelArgs slot of its operand
    bool scalar = false;
    DType dtype = DType::Float32;  // binary: its operand's (float32 or the conv's dtype)
  };
  std::vector<Post> posts;
  int out_slot = 0;
  int threads = 1;
  bool blocked = false;  // oneDNN's layouts, the tensors reordered per call (see preferBlocked)
  std::string toString() const {
    std::string key = fmt::format("{} n{} c{}->{} g{} in{} k{} out{} s{} d{} p{}/{}{} t{}{}", dtypeName(dtype), n, cin,
                                  cout, groups, fmt::join(in, "x"), fmt::join(kernel, "x"), fmt::join(out, "x"),
                                  fmt::join(strides, "x"), fmt::join(dilations, "x"), fmt::join(pad_l, "x"),
                                  fmt::join(pad_r, "x"), bias ? " bias" : "", threads, blocked ? " blocked" : "");
    for (const Post& post : posts) {
      key += fmt::format(" {}{}{}", opIdent(post.op), post.scalar ? "[1]" : "",
                         post.operand >= 0 && post.dtype != DType::Float32 ? dtypeName(post.dtype) : "");
    }
    return key;
  }
};

// A packed weight (the conv family's packed operand, cached on the kernel while the same weight
// tensor comes back: PackedOperandCache) is a header naming the layout it was reordered into
// (layoutId), then the weight in that layout. Its address is in scalars[kScalarPacked], the low
// bit set for PackMode::PackOnly (the buffer is 64-byte aligned).
constexpr int kScalarPacked = matmul::kScalarPackOnly;  // scalars[kScalarLibrary] holds the primitive
constexpr std::int64_t kPackedHeader = 64;
constexpr std::uintptr_t kPackOnlyTag = 1;

// A process-wide number (from 1) for each distinct blocked weight layout primitives chose: a
// packed weight is read only by a primitive whose weight layout it names, since one kernel's
// primitives for other image sizes may choose another.
std::int64_t layoutId(const dnnl_memory_desc_t* desc) {
  static std::mutex mutex;
  static auto* layouts = new std::vector<dnnl_memory_desc_t>();  // never destroyed, as the cache
  std::lock_guard<std::mutex> lock(mutex);
  for (std::size_t i = 0; i < layouts->size(); ++i) {
    if (dnnl_memory_desc_equal(&(*layouts)[i], desc) != 0) return static_cast<std::int64_t>(i) + 1;
  }
  layouts->push_back(*desc);
  return static_cast<std::int64_t>(layouts->size());
}

// Whether a blocked conv takes its input and output in channel blocks of 16 (nChw16c: oneDNN 2.6's
// direct jit:avx512_core kernel) rather than the layout oneDNN picks (channels last: its brgconv
// kernel): for float32 convs of 256 and more channels each side (resnet18's last two stages).
// Measured one thread on this session's Intel host (BENCHMARKS.md issue 21, "resnet18 between
// convs"): the 3x3 conv 512->512 at 7x7 batch 8 13.7-16.0 ms against 21.7-25.5 ms, 256->256 at
// 14x14 batch 8 18.2 against 32.0 ms, at batch 1 equal or 5-10% faster; with 64 or 128 channels
// brgconv is faster (64 at 56x56: 2.25 against 2.70 ms).
bool channelBlocks(const Problem& p) {
  return p.dtype == DType::Float32 && p.groups == 1 && p.cin >= 256 && p.cout >= 256 && p.cin % 16 == 0 &&
         p.cout % 16 == 0;
}

// The data layouts a blocked primitive is built on (the weight's is always oneDNN's pick):
// Picked: src and dst in the layouts oneDNN picks (format any: channels last, brgconv, for most
// convs); Blocks16: src and dst in channel blocks of 16 (channelBlocks); PlainInBlocks16Out: src
// as it is (NCHW) and dst in channel blocks of 16 (jit:avx512_core's first-conv kernel), one
// reorder per call (the output's) instead of two.
enum class DataLayout { Picked, Blocks16, PlainInBlocks16Out };

// Whether a blocked float32 conv with few input channels (a stem: 3 at resnet's 7x7/2) runs on
// the primitive that reads its input as it is and writes channel blocks of 16
// (PlainInBlocks16Out), timed against oneDNN's pick on its first calls (Primitive::run). On an
// AMD Zen 5 host oneDNN 2.6 picks brgconv on channels last for resnet's stem, reordering the
// input in and the output out; its jit:avx512_core kernel on the input as it is (what torch's
// oneDNN binding runs) needs one reorder, the output's (BENCHMARKS.md issue 21, Zen 5 layers).
// Which is faster depends on the CPU, hence the race. Only where the weight is small (at most
// kSmallWeightBytes): the packed weight (packedWeight) is in the input-as-is primitive's layout,
// so oneDNN's pick reorders its weight on every call it runs (its race calls count that).
constexpr std::int64_t kSmallWeightBytes = std::int64_t{256} << 10;
bool racesInputAsIs(const Problem& p) {
  std::int64_t weight = p.cout * p.cin * static_cast<std::int64_t>(sizeof(float));
  for (std::int64_t k : p.kernel) weight *= k;
  return p.blocked && p.dtype == DType::Float32 && p.groups == 1 && p.cin < 16 && p.cout % 16 == 0 &&
         weight <= kSmallWeightBytes;
}

// Whether a float32 conv on oneDNN's blocked layouts is weight-bound: its weight has at least as
// many elements as its input and output together (resnet18's last stages at small images: 512
// channels at 4x4 read a 9.4 MB weight for 16 output pixels). There oneDNN's im2col + GEMM on the
// plain layouts, which streams the weight once, may beat its direct blocked kernels, whose
// register blocks along the output row run short; which one is faster depends on the CPU and the
// shape, so such a problem times both on its first calls (Primitive::run), unless its residual add
// is the sum post-op (Primitive::create).
bool weightBound(const Problem& p) {
  if (!p.blocked || p.dtype != DType::Float32) return false;
  std::int64_t weight = p.cout * (p.cin / p.groups), in = p.n * p.cin, out = p.n * p.cout;
  for (std::size_t d = 0; d < p.kernel.size(); ++d) {
    weight *= p.kernel[d];
    in *= p.in[d];
    out *= p.out[d];
  }
  return weight >= in + out;
}

// Calls of a problem with other primitives (a weight-bound one's plain layouts, a stem's input as
// it is) that time its primitives in turn, before the fastest serves the rest.
constexpr int kRaceCalls = 4;

// The seconds the calling thread has run (one OpenMP thread: the conv's own time, which time slices
// lost to other processes do not inflate), or wall seconds when the conv runs on more threads.
double raceClock(int threads) {
  if (threads > 1) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

class Primitive {
 public:
  // The primitive of `problem` (see createLayout); a weight-bound one (weightBound) also holds the
  // plain layouts' primitive, and its first calls time them (run()). A stem (racesInputAsIs, no
  // residual add) is first the primitive on its input as it is (its weight is the one packed),
  // with oneDNN's pick to time against it.
  static Expected<std::unique_ptr<Primitive>> create(const Problem& problem) {
    std::unique_ptr<Primitive> self;
    if (racesInputAsIs(problem) && residualPost(problem) < 0) {
      auto as_is = std::unique_ptr<Primitive>(new Primitive(problem));
      // Not when oneDNN has no kernel but its reference one for it.
      const Status built = as_is->build(false, DataLayout::PlainInBlocks16Out);
      if (built.isOk()) {
        self = std::move(as_is);
        self->own_.kind = Race::InputAsIs;
        Expected<std::unique_ptr<Primitive>> picked = createLayout(problem);
        if (picked && !self->sameLayouts(**picked)) self->others_.push_back({Race::Own, std::move(*picked)});
      }
      logAt(LogLevel::Debug, "JIT", "oneDNN conv {}: {}", problem.toString(),
            !built.isOk()           ? "no primitive on the input as it is: " + built.message()
            : self->others_.empty() ? std::string("on its input as it is, as oneDNN picks")
                                    : std::string("its input as it is against oneDNN's pick"));
    }
    if (self == nullptr) {
      SVM_ASSIGN_OR_RETURN(self, createLayout(problem));
    }
    // Not one whose residual add is the sum post-op: the plain layouts take it as a binary post-op,
    // 1.2-5.9x slower in every such race measured (BENCHMARKS.md issue 21, "The fixed cost per image").
    if (self->problem_.blocked && !self->residual_sum_ && weightBound(self->problem_)) {
      Problem plain = self->problem_;
      plain.blocked = false;
      Expected<std::unique_ptr<Primitive>> other = createLayout(plain);
      if (other) self->others_.push_back({Race::Plain, std::move(*other)});
    }
    return self;
  }

  // A blocked problem's residual add (a binary add of an operand of the output's shape and
  // dtype) is oneDNN's sum post-op: the operand reordered into the blocked output, which the conv
  // then adds to, since oneDNN's blocked kernels have no binary post-op of a whole tensor. When
  // oneDNN cannot create that, the add stays a binary post-op; when it cannot create that either
  // (a post-op its blocked kernels lack), the problem is made on the plain layouts. Channel
  // blocks (channelBlocks) that only oneDNN's reference kernel takes (a CPU without AVX-512) give
  // way to the layout oneDNN picks.
  static Expected<std::unique_ptr<Primitive>> createLayout(const Problem& problem, bool residual_sum = true,
                                                           bool blocks16 = true) {
    auto self = std::unique_ptr<Primitive>(new Primitive(problem));
    Status built = self->build(residual_sum && problem.blocked,
                               blocks16 && channelBlocks(problem) ? DataLayout::Blocks16 : DataLayout::Picked);
    if (!built.isOk() && problem.blocked) {
      if (blocks16 && channelBlocks(problem)) return createLayout(problem, residual_sum, false);
      if (residual_sum && residualPost(problem) >= 0) return createLayout(problem, false, false);
      Problem plain = problem;
      plain.blocked = false;
      return createLayout(plain);
    }
    SVM_RETURN_IF_ERROR(built);
    return self;
  }
  ~Primitive() {
    for (Reorder& r : reorders_) {
      if (r.primitive != nullptr) dnnl_primitive_destroy(r.primitive);
      if (r.pd != nullptr) dnnl_primitive_desc_destroy(r.pd);
      if (r.blocked != nullptr) dnnl_memory_destroy(r.blocked);
    }
    for (dnnl_memory_t memory : memories_) dnnl_memory_destroy(memory);
    if (scratchpad_ != nullptr) dnnl_memory_destroy(scratchpad_);
    if (primitive_ != nullptr) dnnl_primitive_destroy(primitive_);
    if (pd_ != nullptr) dnnl_primitive_desc_destroy(pd_);
    if (stream_ != nullptr) dnnl_stream_destroy(stream_);
    if (engine_ != nullptr) dnnl_engine_destroy(engine_);
  }
  Primitive(const Primitive&) = delete;
  Primitive& operator=(const Primitive&) = delete;

  // Runs on the call's operands; false (with the reason) when oneDNN refuses. With a packed
  // weight (scalars[kScalarPacked]): PackOnly reorders the weight into it and computes nothing
  // (false when oneDNN refuses: the header then names no layout); Read takes the weight from it
  // when its header names this primitive's weight layout, else reorders the weight as usual.
  // With other primitives (create()), the first kRaceCalls calls take turns among them (this one
  // first) and time each; the fastest (its best call) then runs every later call. Another
  // primitive that fails is dropped (this one runs that call and the rest).
  bool run(const KernelArgs& args, std::string* reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool pack_only = (static_cast<std::uintptr_t>(args.scalars[kScalarPacked]) & kPackOnlyTag) != 0;
    if (others_.empty() || pack_only || winner_ == 0) return runHere(args, reason);
    if (winner_ > 0) {
      if (others_[static_cast<std::size_t>(winner_ - 1)].primitive->run(args, reason)) return true;
      winner_ = 0;
      return runHere(args, reason);
    }
    const int candidates = static_cast<int>(others_.size()) + 1;
    int turn = race_calls_ % candidates;
    if (turn > 0 && others_[static_cast<std::size_t>(turn - 1)].primitive == nullptr) turn = 0;  // dropped
    Primitive* runs = turn == 0 ? this : others_[static_cast<std::size_t>(turn - 1)].primitive.get();
    const double start = raceClock(problem_.threads);
    const bool ran = turn == 0 ? runHere(args, reason) : runs->run(args, reason);
    const double seconds = raceClock(problem_.threads) - start;
    if (!ran && turn > 0) {
      others_[static_cast<std::size_t>(turn - 1)].primitive.reset();
      others_[static_cast<std::size_t>(turn - 1)].best = std::numeric_limits<double>::infinity();
      ++race_calls_;
      return runHere(args, reason);
    }
    Race& side = turn == 0 ? own_ : others_[static_cast<std::size_t>(turn - 1)];
    if (ran) side.best = std::min(side.best, seconds);
    if (++race_calls_ >= std::max(kRaceCalls, candidates)) {
      winner_ = 0;
      for (int i = 1; i < candidates; ++i) {
        if (others_[static_cast<std::size_t>(i - 1)].best <
            (winner_ == 0 ? own_ : others_[static_cast<std::size_t>(winner_ - 1)]).best)
          winner_ = i;
      }
      races.fetch_add(1, std::memory_order_relaxed);
      const Race::Kind won = winner_ == 0 ? own_.kind : others_[static_cast<std::size_t>(winner_ - 1)].kind;
      if (won == Race::Plain) plain_picks.fetch_add(1, std::memory_order_relaxed);
      if (won == Race::InputAsIs) input_as_is_picks.fetch_add(1, std::memory_order_relaxed);
      std::string times = fmt::format("{} {:.3f} ms", raceName(own_.kind), own_.best * 1e3);
      for (const Race& other : others_) times += fmt::format(", {} {:.3f} ms", raceName(other.kind), other.best * 1e3);
      logAt(LogLevel::Debug, "JIT", "oneDNN conv {}: the {} layouts ({})", problem_.toString(),
            raceName(winner_ == 0 ? own_.kind : others_[static_cast<std::size_t>(winner_ - 1)].kind), times);
    }
    return ran;
  }
  const Problem& problem() const { return problem_; }
  // The bytes a packed weight takes (its header, then the weight in the primitive's layout); 0
  // when the primitive reads the weight where it is.
  std::int64_t packedBytes() {
    const Reorder* weight = weightReorder();
    if (weight == nullptr || weight_layout_ == 0) return 0;
    return kPackedHeader + static_cast<std::int64_t>(
                               dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd_, dnnl_query_weights_md, 0)));
  }
  static std::atomic<bool> fail_for_testing;
  static std::atomic<std::uint64_t> weight_reorders;   // per-call weight reorders (no packed weight)
  static std::atomic<std::uint64_t> operand_reorders;  // calls that reordered a residual (build(true))
  static std::atomic<std::uint64_t> races;             // problems that timed their primitives (run())
  static std::atomic<std::uint64_t> plain_picks;       // those whose plain primitive was faster
  static std::atomic<std::uint64_t> input_as_is_picks;  // those whose primitive on the input as it is was

 private:
  // run() on this primitive's own layouts (mutex_ held).
  bool runHere(const KernelArgs& args, std::string* reason) {
    const auto tagged = static_cast<std::uintptr_t>(args.scalars[kScalarPacked]);
    auto* packed = reinterpret_cast<std::byte*>(tagged & ~std::uintptr_t{kPackedHeader - 1});
    Reorder* weight = weightReorder();
    if (packed != nullptr && (tagged & kPackOnlyTag) != 0) return pack(args, packed, reason);
    const bool packed_weight = packed != nullptr && weight != nullptr && weight_layout_ != 0 &&
                               *reinterpret_cast<const std::int64_t*>(packed) == weight_layout_;
    std::vector<void*> pointers = {args.data[kX], args.data[kW]};
    if (problem_.bias) pointers.push_back(args.data[kBias]);
    pointers.push_back(args.data[problem_.out_slot]);
    for (const Problem::Post& post : problem_.posts) {
      if (post.operand >= 0) pointers.push_back(args.data[post.operand]);
    }
    Status status = Status::ok();
    for (std::size_t i = 0; i < pointers.size() && status.isOk(); ++i)
      status = check(dnnl_memory_set_data_handle(memories_[i], pointers[i]), "memory_set_data_handle");
    if (status.isOk() && fail_for_testing.load(std::memory_order_relaxed))
      status = check(dnnl_runtime_error, "primitive_execute");
    // The calling thread's buffer holds the scratchpad and, blocked, the reordered tensors (the
    // weight's unless a packed copy of it serves).
    std::byte* buffer = nullptr;
    if (status.isOk() && blocked_bytes_ > 0) {
      buffer = static_cast<std::byte*>(ir::threadBuffer<BlockedTag>(blocked_bytes_, std::int64_t{1} << 16));
      if (buffer == nullptr) status = makeError(ErrorCode::Unsupported, "no memory for the reordered tensors");
    }
    if (status.isOk() && scratchpad_ != nullptr)
      status = check(dnnl_memory_set_data_handle(scratchpad_, buffer), "memory_set_data_handle");
    for (Reorder& r : reorders_) {
      if (!status.isOk()) break;
      std::byte* data = packed_weight && &r == weight ? packed + kPackedHeader : buffer + r.offset;
      status = check(dnnl_memory_set_data_handle(r.blocked, data), "memory_set_data_handle");
    }
    const library::OmpThreads threads(problem_.threads);
    for (Reorder& r : reorders_) {
      if (!status.isOk() || r.into_plain || (packed_weight && &r == weight)) continue;
      status = execute(r.primitive, r.plain, r.blocked);
    }
    if (status.isOk() && weight != nullptr && !packed_weight) weight_reorders.fetch_add(1, std::memory_order_relaxed);
    if (status.isOk() && residual_sum_) operand_reorders.fetch_add(1, std::memory_order_relaxed);
    if (status.isOk()) {
      status =
          check(dnnl_primitive_execute(primitive_, stream_, static_cast<int>(exec_args_.size()), exec_args_.data()),
                "primitive_execute");
    }
    for (Reorder& r : reorders_) {
      if (!status.isOk() || !r.into_plain) continue;
      status = execute(r.primitive, r.blocked, r.plain);
    }
    if (status.isOk()) status = check(dnnl_stream_wait(stream_), "stream_wait");
    if (!status.isOk()) *reason = status.message();
    return status.isOk();
  }

  struct BlockedTag {};
  // A tensor oneDNN wants in another layout than the plain one: the reorder between them, the
  // blocked memory (its data at `offset` in the thread's buffer), which way it goes.
  struct Reorder {
    dnnl_primitive_desc_t pd = nullptr;
    dnnl_primitive_t primitive = nullptr;
    dnnl_memory_t plain = nullptr, blocked = nullptr;
    std::int64_t offset = 0;
    bool into_plain = false;  // the output: blocked -> plain after the conv
  };

  explicit Primitive(Problem problem) : problem_(std::move(problem)) {}

  // The first post-op that adds an operand of the output's shape and dtype (a residual add), -1 if none.
  static int residualPost(const Problem& p) {
    for (std::size_t i = 0; i < p.posts.size(); ++i) {
      const Problem::Post& post = p.posts[i];
      if (post.op == OpId::Add && post.operand >= 0 && !post.scalar && post.dtype == p.dtype)
        return static_cast<int>(i);
    }
    return -1;
  }

  Reorder* weightReorder() {
    for (Reorder& r : reorders_) {
      if (r.plain == memories_[kW]) return &r;
    }
    return nullptr;
  }

  // PackOnly: the weight reordered into `packed` after its header, which then names the layout
  // (0 when there is nothing to pack or oneDNN refuses).
  bool pack(const KernelArgs& args, std::byte* packed, std::string* reason) {
    auto* header = reinterpret_cast<std::int64_t*>(packed);
    *header = 0;
    Reorder* weight = weightReorder();
    if (weight == nullptr || weight_layout_ == 0) return true;
    Status status = check(dnnl_memory_set_data_handle(weight->plain, args.data[kW]), "memory_set_data_handle");
    if (status.isOk())
      status = check(dnnl_memory_set_data_handle(weight->blocked, packed + kPackedHeader), "memory_set_data_handle");
    if (status.isOk()) {
      const library::OmpThreads threads(problem_.threads);
      status = execute(weight->primitive, weight->plain, weight->blocked);
    }
    if (status.isOk()) status = check(dnnl_stream_wait(stream_), "stream_wait");
    if (!status.isOk()) {
      *reason = status.message();
      return false;
    }
    *header = weight_layout_;
    return true;
  }

  Status execute(dnnl_primitive_t reorder, dnnl_memory_t from, dnnl_memory_t to) {
    const dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    return check(dnnl_primitive_execute(reorder, stream_, 2, args), "reorder execute");
  }

  // The conv's memory (exec_args_ index `index`, plain `plain_desc`) in the layout the primitive
  // chose (`chosen`): when it differs, a reorder and a blocked memory that take its place. With
  // `offset` (a residual into the output's blocked bytes) the blocked memory is at that offset of
  // the thread's buffer, and the primitive's argument stays (the sum post-op reads none).
  Status blockedMemory(std::size_t index, const dnnl_memory_desc_t* chosen, const dnnl_memory_desc_t& plain_desc,
                       bool into_plain, std::int64_t offset = -1) {
    if (chosen == nullptr) return makeError(ErrorCode::Unsupported, "oneDNN conv: no memory descriptor to query");
    if (dnnl_memory_desc_equal(chosen, &plain_desc) != 0) return Status::ok();
    Reorder r;
    r.plain = memories_[index];
    r.into_plain = into_plain;
    r.offset = offset >= 0 ? offset : blocked_bytes_;
    if (offset < 0) blocked_bytes_ += (static_cast<std::int64_t>(dnnl_memory_desc_get_size(chosen)) + 63) / 64 * 64;
    SVM_RETURN_IF_ERROR(check(dnnl_memory_create(&r.blocked, chosen, engine_, DNNL_MEMORY_NONE), "memory_create"));
    reorders_.push_back(r);  // owns r.blocked from here on (the destructor frees it)
    Reorder& added = reorders_.back();
    const dnnl_memory_desc_t* from = into_plain ? chosen : &plain_desc;
    const dnnl_memory_desc_t* to = into_plain ? &plain_desc : chosen;
    // The reorder's OpenMP team is sized now, from the nthreads ICV (run() and pack() execute it as
    // created): the problem's own task count, so a one-task call (validation's) starts no team.
    const library::OmpThreads threads(problem_.threads);
    SVM_RETURN_IF_ERROR(check(dnnl_reorder_primitive_desc_create(&added.pd, from, engine_, to, engine_, nullptr),
                              "reorder_desc_create"));
    SVM_RETURN_IF_ERROR(check(dnnl_primitive_create(&added.primitive, added.pd), "reorder_create"));
    if (offset < 0) exec_args_[index].memory = added.blocked;
    return Status::ok();
  }

  // The layout oneDNN picks for the output of this blocked conv, without post-ops (build(true)).
  Expected<dnnl_memory_desc_t> outputLayout(dnnl_convolution_desc_t desc) {
    dnnl_primitive_attr_t attr = nullptr;
    dnnl_primitive_desc_t pd = nullptr;
    Status status = check(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    if (status.isOk())
      status = check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "set_scratchpad_mode");
    if (status.isOk()) {
      const library::OmpThreads threads(problem_.threads);
      status = check(dnnl_primitive_desc_create(&pd, &desc, attr, engine_, nullptr), "primitive_desc_create");
    }
    dnnl_memory_desc_t dst{};
    if (status.isOk()) dst = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    if (pd != nullptr) dnnl_primitive_desc_destroy(pd);
    if (attr != nullptr) dnnl_primitive_attr_destroy(attr);
    SVM_RETURN_IF_ERROR(status);
    return dst;
  }

  // residual_sum (a blocked problem): its residual add (residualPost) as the sum post-op, the
  // operand reordered per call into the blocked output the conv adds to; an error when oneDNN
  // then picks another output layout, or the plain one. blocks16 (a blocked problem): src and dst in
  // channel blocks of 16, PlainInBlocks16Out the dst only (see DataLayout); an error when only
  // oneDNN's reference kernel takes them.
  Status build(bool residual_sum, DataLayout layout) {
    layout_ = layout;
    const bool blocks16 = layout != DataLayout::Picked;
    const Problem& p = problem_;
    SVM_RETURN_IF_ERROR(check(dnnl_engine_create(&engine_, dnnl_cpu, 0), "engine_create"));
    SVM_RETURN_IF_ERROR(check(dnnl_stream_create(&stream_, engine_, dnnl_stream_default_flags), "stream_create"));
    // Plain layouts: [N, C, spatial...], the weight [Cout, Cin/g, k...] or, grouped, [g, Cout/g,
    // Cin/g, k...] (the same bytes), the bias [Cout].
    const int rank = p.spatial + 2;
    auto plain = [](dnnl_memory_desc_t* desc, std::vector<std::int64_t> dims, DType dtype) {
      dnnl_dims_t d = {}, steps = {};
      std::int64_t dense = 1;
      for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
        d[i] = dims[static_cast<std::size_t>(i)];
        steps[i] = dense;
        dense *= dims[static_cast<std::size_t>(i)];
      }
      return check(dnnl_memory_desc_init_by_strides(desc, static_cast<int>(dims.size()), d, dnnlType(dtype), steps),
                   "memory_desc_init_by_strides");
    };
    std::vector<std::int64_t> src_dims = {p.n, p.cin}, dst_dims = {p.n, p.cout}, w_dims;
    if (p.groups > 1) w_dims = {p.groups, p.cout / p.groups};
    else w_dims = {p.cout};
    w_dims.push_back(p.cin / p.groups);
    src_dims.insert(src_dims.end(), p.in.begin(), p.in.end());
    dst_dims.insert(dst_dims.end(), p.out.begin(), p.out.end());
    w_dims.insert(w_dims.end(), p.kernel.begin(), p.kernel.end());
    // Memories in execution order: src, weights, (bias), dst, then the binary post-ops' operands.
    std::vector<dnnl_memory_desc_t> descs(3);
    SVM_RETURN_IF_ERROR(plain(&descs[0], src_dims, p.dtype));
    SVM_RETURN_IF_ERROR(plain(&descs[1], w_dims, p.dtype));
    dnnl_memory_desc_t bias_desc{};
    if (p.bias) SVM_RETURN_IF_ERROR(plain(&bias_desc, {p.cout}, p.dtype));
    SVM_RETURN_IF_ERROR(plain(&descs[2], dst_dims, p.dtype));
    exec_args_ = {{DNNL_ARG_SRC, nullptr}, {DNNL_ARG_WEIGHTS, nullptr}, {DNNL_ARG_DST, nullptr}};
    if (p.bias) {
      descs.insert(descs.begin() + 2, bias_desc);
      exec_args_.insert(exec_args_.begin() + 2, {DNNL_ARG_BIAS, nullptr});
    }

    dnnl_dims_t strides = {}, dilates = {}, pad_l = {}, pad_r = {};
    for (int d = 0; d < p.spatial; ++d) {
      const auto i = static_cast<std::size_t>(d);
      strides[d] = p.strides[i];
      dilates[d] = p.dilations[i] - 1;  // oneDNN counts the gaps
      pad_l[d] = p.pad_l[i];
      pad_r[d] = p.pad_r[i];
    }
    // Blocked: src, weights and dst in the layouts oneDNN picks (format any), src and dst in
    // channel blocks of 16 where that is faster (channelBlocks).
    const std::size_t dst = p.bias ? 3 : 2;
    dnnl_memory_desc_t conv_src = descs[0], conv_w = descs[1], conv_dst = descs[dst];
    if (p.blocked) {
      const dnnl_format_tag_t blocks16_tags[] = {dnnl_aBc16b, dnnl_aBcd16b, dnnl_aBcde16b};
      const dnnl_format_tag_t data = blocks16 ? blocks16_tags[p.spatial - 1] : dnnl_format_tag_any;
      for (dnnl_memory_desc_t* any : {&conv_src, &conv_w, &conv_dst}) {
        if (any == &conv_src && layout == DataLayout::PlainInBlocks16Out) continue;  // as it is
        SVM_RETURN_IF_ERROR(check(dnnl_memory_desc_init_by_tag(any, any->ndims, any->dims, dnnlType(p.dtype),
                                                               any == &conv_w ? dnnl_format_tag_any : data),
                                  "memory_desc_init_by_tag"));
      }
    }
    dnnl_convolution_desc_t desc;
    SVM_RETURN_IF_ERROR(check(dnnl_dilated_convolution_forward_desc_init(
                                  &desc, dnnl_forward_inference, dnnl_convolution_direct, &conv_src, &conv_w,
                                  p.bias ? &bias_desc : nullptr, &conv_dst, strides, dilates, pad_l, pad_r),
                              "convolution_forward_desc_init"));
    // residual_sum: the post-op that becomes the sum, the output's blocked layout, the operand's descs index.
    int sum_post = residual_sum ? residualPost(p) : -1;
    dnnl_memory_desc_t out_layout{};
    std::size_t sum_operand = 0;
    if (sum_post >= 0) {
      SVM_ASSIGN_OR_RETURN(out_layout, outputLayout(desc));
      if (dnnl_memory_desc_equal(&out_layout, &descs[dst]) != 0)
        return makeError(ErrorCode::Unsupported, "oneDNN conv: a plain output, no sum post-op");
    }

    dnnl_post_ops_t post_ops = nullptr;
    dnnl_primitive_attr_t attr = nullptr;
    SVM_RETURN_IF_ERROR(check(dnnl_post_ops_create(&post_ops), "post_ops_create"));
    Status status = check(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    int index = 0;
    for (const Problem::Post& post : p.posts) {
      if (!status.isOk()) break;
      const PostOpKind* kind = postOpOf(post.op);
      if (!kind->binary) {
        status =
            check(dnnl_post_ops_append_eltwise(post_ops, 1.f, kind->alg, kind->alpha, 0.f), "post_ops_append_eltwise");
      } else {
        dnnl_memory_desc_t operand;
        status = plain(&operand, post.scalar ? std::vector<std::int64_t>(static_cast<std::size_t>(rank), 1) : dst_dims,
                       post.dtype);
        if (!status.isOk()) break;
        if (index == sum_post) {  // its memory stays among the arguments, which the sum does not read
          sum_operand = descs.size();
          status = check(dnnl_post_ops_append_sum(post_ops, 1.f), "post_ops_append_sum");
        } else {
          status = check(dnnl_post_ops_append_binary(post_ops, kind->alg, &operand), "post_ops_append_binary");
        }
        descs.push_back(operand);
        exec_args_.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, nullptr});
      }
      ++index;
    }
    if (status.isOk()) status = check(dnnl_primitive_attr_set_post_ops(attr, post_ops), "primitive_attr_set_post_ops");
    // The scratchpad is the calling thread's buffer (run()), not oneDNN's process-wide one, which
    // distinct primitives running at once on different threads would share.
    if (status.isOk())
      status = check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "set_scratchpad_mode");
    if (status.isOk()) {
      const library::OmpThreads threads(p.threads);  // an OpenMP build sizes its blocking for its threads
      status = check(dnnl_primitive_desc_create(&pd_, &desc, attr, engine_, nullptr),
                     "primitive_desc_create (no implementation for this conv, layout or CPU)");
    }
    dnnl_primitive_attr_destroy(attr);
    dnnl_post_ops_destroy(post_ops);
    SVM_RETURN_IF_ERROR(status);
    // The primitive's OpenMP team is sized as it is made too (run() executes it as created).
    const library::OmpThreads threads(p.threads);
    SVM_ASSIGN_OR_RETURN(const std::int64_t scratch_bytes,
                         library::createPrimitive(engine_, pd_, descs, primitive_, memories_, exec_args_, scratchpad_));
    blocked_bytes_ = (scratch_bytes + 63) / 64 * 64;
    if (p.blocked) {
      const dnnl_memory_desc_t* out = dnnl_primitive_desc_query_md(pd_, dnnl_query_dst_md, 0);
      if (sum_post >= 0 && (out == nullptr || dnnl_memory_desc_equal(out, &out_layout) == 0))
        return makeError(ErrorCode::Unsupported, "oneDNN conv: another output layout with the sum post-op");
      // Its reference implementation (another post-op its fast kernels lack, channel blocks on a CPU
      // without AVX-512) is slower than the binary add or the layout oneDNN picks.
      const char* impl = nullptr;
      if ((sum_post >= 0 || blocks16) &&
          (dnnl_primitive_desc_query(pd_, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || impl == nullptr ||
           std::string_view(impl).starts_with("ref")))
        return makeError(ErrorCode::Unsupported,
                         "oneDNN conv: only its reference kernel takes these post-ops or layouts");
      SVM_RETURN_IF_ERROR(blockedMemory(0, dnnl_primitive_desc_query_md(pd_, dnnl_query_src_md, 0), descs[0], false));
      SVM_RETURN_IF_ERROR(
          blockedMemory(1, dnnl_primitive_desc_query_md(pd_, dnnl_query_weights_md, 0), descs[1], false));
      if (weightReorder() != nullptr)
        weight_layout_ = layoutId(dnnl_primitive_desc_query_md(pd_, dnnl_query_weights_md, 0));
      SVM_RETURN_IF_ERROR(blockedMemory(dst, out, descs[dst], true));
      if (sum_post >= 0) {
        // The residual reordered into the blocked output's bytes (before the conv: run()).
        const std::int64_t offset = reorders_.back().offset;
        SVM_RETURN_IF_ERROR(blockedMemory(sum_operand, out, descs[sum_operand], false, offset));
        residual_sum_ = true;
      }
    }
    return Status::ok();
  }

  Problem problem_;
  std::mutex mutex_;  // one execution at a time (data handles are set per call)
  dnnl_engine_t engine_ = nullptr;
  dnnl_stream_t stream_ = nullptr;
  dnnl_primitive_desc_t pd_ = nullptr;
  dnnl_primitive_t primitive_ = nullptr;
  std::vector<dnnl_memory_t> memories_;  // the plain tensors, in exec_args_ order
  std::vector<dnnl_exec_arg_t> exec_args_;
  std::vector<Reorder> reorders_;       // blocked: src and weights into oneDNN's layouts, dst out of it
  dnnl_memory_t scratchpad_ = nullptr;  // at the thread buffer's start
  std::int64_t blocked_bytes_ = 0;      // the thread buffer the scratchpad and the reordered tensors take
  std::int64_t weight_layout_ = 0;      // layoutId() of the reordered weight's layout (0: not reordered)
  bool residual_sum_ = false;           // build(true): the residual add is the sum post-op
  DataLayout layout_ = DataLayout::Picked;  // build()'s (a blocked problem's data layouts)
  // Its other primitives (create(): the plain layouts of a weight-bound problem, oneDNN's pick
  // for a stem on its input as it is) and their race with this one (run()): the calls timed so
  // far, each side's kind and best seconds, the winner (-1 while racing, 0 this one, i others_[i -
  // 1]; a dropped one is null). Own: oneDNN's blocked layouts.
  struct Race {
    enum Kind { Own, Plain, InputAsIs } kind = Own;
    std::unique_ptr<Primitive> primitive;
    double best = std::numeric_limits<double>::infinity();
  };
  static const char* raceName(Race::Kind kind) {
    return kind == Race::Plain ? "plain" : kind == Race::InputAsIs ? "input-as-is" : "blocked";
  }
  // Whether `other` reads and writes the data in this primitive's layouts (the same primitive).
  bool sameLayouts(const Primitive& other) const {
    for (dnnl_query_t what : {dnnl_query_src_md, dnnl_query_dst_md}) {
      if (dnnl_memory_desc_equal(dnnl_primitive_desc_query_md(pd_, what, 0),
                                 dnnl_primitive_desc_query_md(other.pd_, what, 0)) == 0)
        return false;
    }
    return true;
  }
  std::vector<Race> others_;
  Race own_;
  int race_calls_ = 0;
  int winner_ = -1;
};
std::atomic<bool> Primitive::fail_for_testing{false};
std::atomic<std::uint64_t> Primitive::weight_reorders{0};
std::atomic<std::uint64_t> Primitive::operand_reorders{0};
std::atomic<std::uint64_t> Primitive::races{0};
std::atomic<std::uint64_t> Primitive::plain_picks{0};
std::atomic<std::uint64_t> Primitive::input_as_is_picks{0};

struct Cache {
  library::PrimitiveCache<Problem, Primitive> primitives{"oneDNN conv", kMaxPrimitives};
  std::atomic<std::uint64_t> calls{0}, run_failures{0};
};
Cache& cache() {
  static Cache* cache = new Cache();  // never destroyed: kernels may run during static destruction
  return *cache;
}

std::atomic<bool> fail_creations_for_testing{false};

Expected<Primitive*> findOrCreate(const Problem& problem) {
  if (fail_creations_for_testing.load(std::memory_order_relaxed))
    return makeError(ErrorCode::Unsupported, "oneDNN conv {}: creation failed (testing)", problem.toString());
  return cache().primitives.findOrCreate(problem, [](const std::string& reason) {
    logAt(LogLevel::Info, "JIT", "{}; the generated conv kernel or the reference runs it", reason);
  });
}

// Whether the primitive runs on oneDNN's own layouts, the input and the weight reordered into them
// and the output out of them on every call, rather than on the plain tensors: for a conv with a
// spatial kernel. Measured one thread, on this session's Intel host (bench/onednn_conv_layout.cc,
// BENCHMARKS.md issue 21): on plain NCHW tensors oneDNN 2.6 has only its im2col + GEMM
// implementation, 1.1-2.0x the time of its blocked brgconv kernels with the reorders at the 3x3
// and 7x7 layers (depthwise 6.5x, 512 channels at 7x7 0.9x), while for 1x1 convs the plain GEMM is
// 1.3-2.6x faster than the blocked kernel with its reorders.
bool preferBlocked(const Problem& p) {
  return std::any_of(p.kernel.begin(), p.kernel.end(), [](std::int64_t k) { return k > 1; });
}

// The problem of `spec` over these extents (x's spatial ones, n); an error when the windows are invalid.
Expected<Problem> problemOf(const KernelSpec& spec, std::int64_t n, const std::vector<std::int64_t>& in) {
  Problem p;
  const OperandSpec& w = spec.inputs[kW];
  p.dtype = w.dtype;
  p.spatial = w.rank - 2;
  p.n = n;
  p.cin = spec.inputs[kX].dims[1].size;
  p.cout = w.dims[0].size;
  p.groups = spec.attrs[kGroups].i;
  p.in = in;
  for (int d = 2; d < w.rank; ++d) p.kernel.push_back(w.dims[d].size);
  WindowAttrs window;
  window.kernel = p.kernel;
  window.strides = spec.attrs[kStrides].ints;
  window.pads = spec.attrs[kPads].ints;
  window.dilations = spec.attrs[kDilations].ints;
  window.auto_pad = spec.attrs[kAutoPad].i;
  SVM_ASSIGN_OR_RETURN(std::vector<AxisWindow> windows, forwardWindows("conv", in, window));
  for (const AxisWindow& a : windows) {
    p.out.push_back(a.out);
    p.strides.push_back(a.stride);
    p.dilations.push_back(a.dilation);
    p.pad_l.push_back(a.pad_before);
    p.pad_r.push_back(a.pad_after);
  }
  p.bias = spec.inputs.size() > kBias && spec.inputs[kBias].is_tensor;
  for (const EpilogueStep& step : spec.epilogue) {
    const OperandSpec* operand = step.operand >= 0 ? &spec.inputs[static_cast<std::size_t>(step.operand)] : nullptr;
    p.posts.push_back({step.op, step.operand, operand != nullptr && oneElement(*operand),
                       operand != nullptr ? operand->dtype : DType::Float32});
  }
  p.out_slot = static_cast<int>(spec.inputs.size());
  // As the generated dense conv sizes its tasks.
  std::int64_t pixels = 1, k = p.cin / p.groups;
  for (std::size_t d = 0; d < p.out.size(); ++d) {
    pixels *= p.out[d];
    k *= p.kernel[d];
  }
  p.threads = n * pixels * p.cout * k >= matmul::kMinParallelWork ? std::max(1, kernelThreads()) : 1;
  // float16/bfloat16: oneDNN's AMX/AVX-512 kernels take its blocked layouts (plain NCHW has no
  // fast 16-bit conv), 1x1 convs too.
  p.blocked = p.dtype != DType::Float32 || preferBlocked(p);
  return p;
}

float applyStep(OpId op, float v, float x) {
  switch (op) {
    case OpId::Relu: return v > 0 ? v : 0;
    case OpId::Tanh: return std::tanh(v);
    case OpId::Sigmoid: return 1.f / (1.f + std::exp(-v));
    case OpId::Silu: return v / (1.f + std::exp(-v));
    case OpId::Gelu: return 0.5f * v * std::erfc(-v * 0.70710678f);
    case OpId::Add: return v + x;
    case OpId::Sub: return v - x;
    case OpId::Mul: return v * x;
    case OpId::Maximum: return std::max(v, x);
    case OpId::Minimum: return std::min(v, x);
    default: return v;
  }
}

// What the primitive computes, as a direct loop (double sums): the fallback when oneDNN refuses
// at run time.
void fallbackConv(const Problem& p, const KernelArgs& args) {
  const void* x = args.data[kX];
  const void* w = args.data[kW];
  const void* bias = p.bias ? args.data[kBias] : nullptr;
  void* out = args.data[p.out_slot];
  // Every spatial rank as 3-D with leading unit axes.
  std::int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, o[3] = {1, 1, 1}, s[3] = {1, 1, 1}, dl[3] = {1, 1, 1},
               pl[3] = {0, 0, 0};
  for (int d = 0; d < p.spatial; ++d) {
    const int a = 3 - p.spatial + d;
    const auto i = static_cast<std::size_t>(d);
    in[a] = p.in[i], k[a] = p.kernel[i], o[a] = p.out[i], s[a] = p.strides[i], dl[a] = p.dilations[i];
    pl[a] = p.pad_l[i];
  }
  const std::int64_t cin_g = p.cin / p.groups, cout_g = p.cout / p.groups;
  const std::int64_t in_plane = in[0] * in[1] * in[2], out_plane = o[0] * o[1] * o[2], taps = k[0] * k[1] * k[2];
  for (std::int64_t n = 0; n < p.n; ++n) {
    for (std::int64_t co = 0; co < p.cout; ++co) {
      const std::int64_t g = co / cout_g;
      for (std::int64_t i = 0; i < out_plane; ++i) {
        const std::int64_t oz = i / (o[1] * o[2]), oy = i / o[2] % o[1], ox = i % o[2];
        double sum = bias != nullptr ? loadAt(bias, p.dtype, co) : 0.0;
        for (std::int64_t ci = 0; ci < cin_g; ++ci) {
          const std::int64_t plane = (n * p.cin + g * cin_g + ci) * in_plane;
          const std::int64_t taps_w = (co * cin_g + ci) * taps;
          for (std::int64_t t = 0; t < taps; ++t) {
            const std::int64_t iz = oz * s[0] - pl[0] + t / (k[1] * k[2]) * dl[0];
            const std::int64_t iy = oy * s[1] - pl[1] + t / k[2] % k[1] * dl[1];
            const std::int64_t ix = ox * s[2] - pl[2] + t % k[2] * dl[2];
            if (iz < 0 || iz >= in[0] || iy < 0 || iy >= in[1] || ix < 0 || ix >= in[2]) continue;
            sum += static_cast<double>(loadAt(w, p.dtype, taps_w + t)) *
                   loadAt(x, p.dtype, plane + (iz * in[1] + iy) * in[2] + ix);
          }
        }
        const std::int64_t at = (n * p.cout + co) * out_plane + i;
        auto v = static_cast<float>(sum);
        for (const Problem::Post& post : p.posts) {
          const float other =
              post.operand < 0 ? 0.f : loadAt(args.data[post.operand], post.dtype, post.scalar ? 0 : at);
          v = applyStep(post.op, v, other);
        }
        storeAt(out, p.dtype, at, v);
      }
    }
  }
}

// Whether this oneDNN has a float16 conv on this CPU (2.6 has none; AVX512-FP16 builds may): a
// 3x3 conv's descriptor created once on its layouts.
bool halfConvs() {
  static const bool has = [] {
    dnnl_engine_t engine = nullptr;
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) return false;
    dnnl_memory_desc_t src, w, dst;
    dnnl_dims_t src_dims = {1, 16, 8, 8}, w_dims = {16, 16, 3, 3}, dst_dims = {1, 16, 8, 8};
    dnnl_dims_t ones = {1, 1}, none = {0, 0};
    dnnl_convolution_desc_t desc;
    dnnl_primitive_desc_t pd = nullptr;
    const bool ok =
        dnnl_memory_desc_init_by_tag(&src, 4, src_dims, dnnl_f16, dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&w, 4, w_dims, dnnl_f16, dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&dst, 4, dst_dims, dnnl_f16, dnnl_format_tag_any) == dnnl_success &&
        dnnl_dilated_convolution_forward_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_direct, &src, &w,
                                                   nullptr, &dst, ones, none, ones, ones) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &desc, nullptr, engine, nullptr) == dnnl_success;
    if (pd != nullptr) dnnl_primitive_desc_destroy(pd);
    dnnl_engine_destroy(engine);
    return ok;
  }();
  return has;
}

}  // namespace

bool available() {
  return onednn::available();
}

Status expressible(const KernelSpec& spec) {
  auto no = [&](std::string_view why) {
    return makeError(ErrorCode::Unsupported, "no oneDNN conv for {}: {}", spec.signature(), why);
  };
  if (spec.op != OpId::Conv || spec.inputs.size() < 2 || spec.attrs.size() <= kAutoPad || spec.fused != nullptr)
    return no("not a conv kernel's spec");
  const OperandSpec& x = spec.inputs[kX];
  const OperandSpec& w = spec.inputs[kW];
  const bool float_type = x.dtype == DType::Float32 || x.dtype == DType::BFloat16 || x.dtype == DType::Float16;
  if (!float_type || w.dtype != x.dtype || x.rank < 3 || x.rank > 5 || w.rank != x.rank)
    return no("float32, bfloat16 or float16 1-D to 3-D convs only");
  if (x.dtype == DType::Float16 && !halfConvs()) return no("this oneDNN has no float16 conv on this CPU");
  if (!x.dims[1].isStatic()) return no("dynamic input channels");
  for (int d = 0; d < w.rank; ++d) {
    if (!w.dims[d].isStatic()) return no("a dynamic weight dim");
  }
  const std::int64_t groups = spec.attrs[kGroups].i;
  if (groups < 1 || x.dims[1].size != w.dims[1].size * groups || w.dims[0].size % groups != 0)
    return no("the channels do not fit the weight and groups");
  for (const EpilogueStep& step : spec.epilogue) {
    const PostOpKind* kind = postOpOf(step.op);
    if (kind == nullptr || kind->binary != (step.operand >= 0))
      return no(fmt::format("{} is no post-op", opIdent(step.op)));
    if (step.swapped && step.op != OpId::Add && step.op != OpId::Mul && step.op != OpId::Maximum &&
        step.op != OpId::Minimum)
      return no(fmt::format("{} with the conv on the right", opIdent(step.op)));
    const DType operand = step.operand >= 0 ? spec.inputs[static_cast<std::size_t>(step.operand)].dtype : x.dtype;
    if (operand != DType::Float32 && operand != x.dtype)
      return no("an epilogue operand neither float32 nor of the conv's dtype");
  }
  return Status::ok();
}

Status createFor(const KernelSpec& spec) {
  SVM_RETURN_IF_ERROR(expressible(spec));
  const OperandSpec& x = spec.inputs[kX];
  std::vector<std::int64_t> in;
  for (int d = 0; d < x.rank; ++d) {
    if (!x.dims[d].isStatic()) return Status::ok();  // at the first call
    if (d >= 2) in.push_back(x.dims[d].size);
  }
  SVM_ASSIGN_OR_RETURN(Problem problem, problemOf(spec, x.dims[0].size, in));
  return findOrCreate(problem).takeStatus();
}

Status prepareCall(const KernelSpec& spec, std::span<const Value* const> inputs, const Tensor& out, KernelArgs& args) {
  const Tensor& x = inputs[kX]->tensor();
  std::vector<std::int64_t> in;
  for (int d = 2; d < x.rank(); ++d) in.push_back(x.dim(d));
  SVM_ASSIGN_OR_RETURN(Problem problem, problemOf(spec, x.dim(0), in));
  if (problem.n == 0 || out.numel() == 0) return makeError(ErrorCode::Unsupported, "oneDNN conv: an empty tensor");
  SVM_ASSIGN_OR_RETURN(Primitive * primitive, findOrCreate(problem));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] != nullptr && inputs[i]->isTensor())
      args.data[i] = const_cast<void*>(static_cast<const void*>(inputs[i]->tensor().rawData()));
  }
  args.data[problem.out_slot] = const_cast<void*>(static_cast<const void*>(out.rawData()));
  args.scalars[matmul::kScalarRunner] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&runLibraryConv));
  args.scalars[matmul::kScalarTasks] = problem.threads;
  args.scalars[matmul::kScalarLibrary] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(primitive));
  return Status::ok();
}

void runLibraryConv(void* /*part*/, const KernelArgs* args, std::int64_t /*tasks*/, std::int64_t /*scratch_bytes*/) {
  auto* primitive = reinterpret_cast<Primitive*>(static_cast<std::uintptr_t>(args->scalars[matmul::kScalarLibrary]));
  Cache& c = cache();
  c.calls.fetch_add(1, std::memory_order_relaxed);
  std::string reason;
  if (primitive->run(*args, &reason)) return;
  c.run_failures.fetch_add(1, std::memory_order_relaxed);
  if ((static_cast<std::uintptr_t>(args->scalars[kScalarPacked]) & kPackOnlyTag) != 0) {
    logAt(LogLevel::Info, "JIT", "oneDNN conv {}: packing the weight failed ({}); it is reordered per call",
          primitive->problem().toString(), reason);
    return;  // the header names no layout: calls reorder the weight themselves
  }
  static std::once_flag once;
  std::call_once(once, [&] {
    logAt(LogLevel::Warn, "JIT", "oneDNN conv {} failed at run time ({}); computed by the fallback loop",
          primitive->problem().toString(), reason);
  });
  fallbackConv(primitive->problem(), *args);
}

ConvLibraryStats stats() {
  Cache& c = cache();
  const auto totals = c.primitives.totals();
  return {totals.primitives,
          totals.create_ms,
          c.calls.load(),
          c.run_failures.load(),
          Primitive::weight_reorders.load(std::memory_order_relaxed),
          Primitive::operand_reorders.load(std::memory_order_relaxed),
          Primitive::races.load(std::memory_order_relaxed),
          Primitive::plain_picks.load(std::memory_order_relaxed),
          Primitive::input_as_is_picks.load(std::memory_order_relaxed)};
}

PackedOperand packedWeight(const KernelArgs& args) {
  // A call the generated kernel runs (its primitive could not be created) has another runner.
  if (args.scalars[matmul::kScalarRunner] !=
      static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&runLibraryConv)))
    return {};
  auto* primitive = reinterpret_cast<Primitive*>(static_cast<std::uintptr_t>(args.scalars[matmul::kScalarLibrary]));
  const std::int64_t bytes = primitive != nullptr ? primitive->packedBytes() : 0;
  if (bytes <= 0) return {};
  // Any size: the stem's 7x7 weight (9,408 elements) would be reordered by a pass of its own per call.
  return {static_cast<int>(kW), bytes, /*any_size=*/true};
}

void usePackedWeight(KernelArgs& args, void* buffer, PackMode mode) {
  args.scalars[kScalarPacked] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(buffer) |
                                                          (mode == PackMode::PackOnly ? kPackOnlyTag : 0));
}

void failExecutionsForTesting(bool fail) {
  Primitive::fail_for_testing.store(fail, std::memory_order_relaxed);
}

void failCreationsForTesting(bool fail) {
  fail_creations_for_testing.store(fail, std::memory_order_relaxed);
}

}  // namespace shapevm::jit::onednn_conv
