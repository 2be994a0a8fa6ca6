// SPDX-License-Identifier: Apache-2.0
// oneDNN matmul primitives for the matmul family's library candidates (see library_onednn.h):
// the post-op table, the primitive cache, the runner and its scalar fallback.
#include "jit/llvm_cpu/library_onednn.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include "jit/llvm_cpu/matmul_plan.h"
#include "support/cpu_cores.h"
#include "support/logging.h"
#include "support/tunables.h"

namespace shapevm::jit::onednn {

namespace {

// Primitives kept at most (one per shape bucket seen; never evicted: prepared calls point at them).
constexpr std::size_t kMaxPrimitives = 512;

// One epilogue step as a oneDNN post-op: an eltwise algorithm (alpha, beta) or a binary one.
struct PostOpKind {
  OpId op;
  bool binary;
  dnnl_alg_kind_t alg;
  float alpha, beta;
};
// The epilogue ops oneDNN expresses (every other one leaves the spec to generated code).
constexpr PostOpKind kPostOps[] = {
    {OpId::Relu, false, dnnl_eltwise_relu, 0.f, 0.f},
    {OpId::Tanh, false, dnnl_eltwise_tanh, 0.f, 0.f},
    {OpId::Sigmoid, false, dnnl_eltwise_logistic, 0.f, 0.f},
    {OpId::Gelu, false, dnnl_eltwise_gelu_erf, 0.f, 0.f},
    {OpId::Exp, false, dnnl_eltwise_exp, 0.f, 0.f},
    {OpId::Log, false, dnnl_eltwise_log, 0.f, 0.f},
    {OpId::Sqrt, false, dnnl_eltwise_sqrt, 0.f, 0.f},
    {OpId::Abs, false, dnnl_eltwise_abs, 0.f, 0.f},
    {OpId::Silu, false, dnnl_eltwise_swish, 1.f, 0.f},
    {OpId::Neg, false, dnnl_eltwise_linear, -1.f, 0.f},
    {OpId::Add, true, dnnl_binary_add, 0.f, 0.f},
    {OpId::Sub, true, dnnl_binary_sub, 0.f, 0.f},
    {OpId::Mul, true, dnnl_binary_mul, 0.f, 0.f},
    {OpId::Div, true, dnnl_binary_div, 0.f, 0.f},
    {OpId::Maximum, true, dnnl_binary_max, 0.f, 0.f},
    {OpId::Minimum, true, dnnl_binary_min, 0.f, 0.f},
};

const PostOpKind* postOpOf(OpId op) {
  for (const PostOpKind& kind : kPostOps) {
    if (kind.op == op) return &kind;
  }
  return nullptr;
}

bool commutes(OpId op) {
  return op == OpId::Add || op == OpId::Mul || op == OpId::Maximum || op == OpId::Minimum;
}

Expected<dnnl_data_type_t> dnnlType(DType dtype) {
  switch (dtype) {
    case DType::Float32: return dnnl_f32;
    case DType::BFloat16: return dnnl_bf16;
    case DType::Float16: return dnnl_f16;
    default: return makeError(ErrorCode::Unsupported, "oneDNN matmul: no {} operands", dtypeName(dtype));
  }
}

Status check(dnnl_status_t status, const char* what) {
  if (status == dnnl_success) return Status::ok();
  return makeError(ErrorCode::Unsupported, "oneDNN {} failed (status {})", what, static_cast<int>(status));
}

// oneDNN's OpenMP threads for the calling thread (its nthreads ICV) held to the kernel's task
// count for the scope, then restored (other OpenMP users on this thread, e.g. torch in the Python
// module, keep theirs). libgomp is oneDNN's own dependency: looked up, not linked.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) {
    static const auto set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    static const auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    if (set == nullptr || get == nullptr) return;
    saved_ = get();
    if (saved_ == threads) return;
    set_ = set;
    set_(threads);
  }
  ~OmpThreads() {
    if (set_ != nullptr) set_(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  void (*set_)(int) = nullptr;
  int saved_ = 1;
};

// Axes of the canonical [batch0, batch1, rows, cols] views (matmul_plan.h) a problem is kept in.
constexpr int kAxes = matmul::kMaxBatchRank + 2;

// One operand over the canonical axes: its dims (1 where broadcast) and strides (0 there).
struct View {
  std::int64_t dims[kAxes] = {1, 1, 1, 1};
  std::int64_t strides[kAxes] = {0, 0, 0, 0};
  std::string toString() const {
    return fmt::format("{}x{}x{}x{}:{},{},{},{}", dims[0], dims[1], dims[2], dims[3], strides[0], strides[1],
                       strides[2], strides[3]);
  }
  // Element offset of (b0, b1, row, col); broadcast axes (stride 0) ignore their index.
  std::int64_t at(std::int64_t b0, std::int64_t b1, std::int64_t row, std::int64_t col) const {
    return b0 * strides[0] + b1 * strides[1] + row * strides[2] + col * strides[3];
  }
};

// A view whose dims follow its strides: the full output size along an axis it steps along, 1 where
// it is broadcast (stride 0) — how oneDNN broadcasts a batch axis or a post-op operand.
View viewOf(const std::int64_t out_dims[kAxes], const std::int64_t* strides) {
  View view;
  for (int d = 0; d < kAxes; ++d) {
    view.strides[d] = strides[d];
    view.dims[d] = strides[d] != 0 ? out_dims[d] : 1;
  }
  return view;
}

// One primitive's problem: what the cache is keyed by (toString) and the runner reads. Batch
// axes are the canonical views' (rank 2 + batch_rank of them are given to oneDNN).
struct Problem {
  DType dtype = DType::Float32;
  int batch_rank = 0;              // 0..2 leading batch axes
  std::int64_t batch[2] = {1, 1};  // the output's batch dims (canonical, right-aligned)
  std::int64_t m = 0, k = 0, n = 0;
  View a, b, c;
  struct Post {
    OpId op;
    int operand = -1;  // binary: the KernelArgs slot of its operand
    View view;         // broadcast to the output
  };
  std::vector<Post> posts;
  int out_slot = 0;
  int threads = 1;
  std::string toString() const {
    std::string key = fmt::format("{} {}x{}x{} b{}:{}x{} a{} b{} c{} t{}", dtypeShortName(dtype), m, k, n, batch_rank,
                                  batch[0], batch[1], a.toString(), b.toString(), c.toString(), threads);
    for (const Post& post : posts) {
      key += fmt::format(" {}", opIdent(post.op));
      if (post.operand >= 0) key += fmt::format("[{}]", post.view.toString());
    }
    return key;
  }
  // The output's dims over the canonical axes.
  void outDims(std::int64_t dims[kAxes]) const { dims[0] = batch[0], dims[1] = batch[1], dims[2] = m, dims[3] = n; }
};

// oneDNN wants a positive stride for every dim; a dim of one element may have any: it gets the
// dense one.
void denseWhereSingle(int rank, std::int64_t* dims, std::int64_t* strides) {
  std::int64_t dense = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (dims[d] == 1 || strides[d] == 0) strides[d] = dense;
    dense *= dims[d];
  }
}

class Primitive {
 public:
  static Expected<std::unique_ptr<Primitive>> create(const Problem& problem) {
    auto self = std::unique_ptr<Primitive>(new Primitive(problem));
    SVM_RETURN_IF_ERROR(self->build());
    return self;
  }
  ~Primitive() {
    for (dnnl_memory_t memory : memories_) dnnl_memory_destroy(memory);
    if (primitive_ != nullptr) dnnl_primitive_destroy(primitive_);
    if (pd_ != nullptr) dnnl_primitive_desc_destroy(pd_);
    if (stream_ != nullptr) dnnl_stream_destroy(stream_);
    if (engine_ != nullptr) dnnl_engine_destroy(engine_);
  }
  // Runs on these operands; false (with the reason) when oneDNN refuses.
  bool run(const KernelArgs& args, std::string* reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    void* pointers[2 + kMaxKernelOperands];
    std::size_t count = 0;
    pointers[count++] = args.data[0];
    pointers[count++] = args.data[1];
    pointers[count++] = args.data[problem_.out_slot];
    for (const Problem::Post& post : problem_.posts) {
      if (post.operand >= 0) pointers[count++] = args.data[post.operand];
    }
    Status status = Status::ok();
    for (std::size_t i = 0; i < count && status.isOk(); ++i)
      status = check(dnnl_memory_set_data_handle(memories_[i], pointers[i]), "memory_set_data_handle");
    if (status.isOk() && fail_for_testing_.load(std::memory_order_relaxed))
      status = check(dnnl_runtime_error, "primitive_execute");
    if (status.isOk()) {
      const OmpThreads threads(problem_.threads);
      status =
          check(dnnl_primitive_execute(primitive_, stream_, static_cast<int>(exec_args_.size()), exec_args_.data()),
                "primitive_execute");
    }
    if (status.isOk()) status = check(dnnl_stream_wait(stream_), "stream_wait");
    if (!status.isOk()) *reason = status.message();
    return status.isOk();
  }
  const Problem& problem() const { return problem_; }
  static std::atomic<bool> fail_for_testing_;

 private:
  explicit Primitive(Problem problem) : problem_(std::move(problem)) {}

  Status build() {
    SVM_ASSIGN_OR_RETURN(dnnl_data_type_t type, dnnlType(problem_.dtype));
    SVM_RETURN_IF_ERROR(check(dnnl_engine_create(&engine_, dnnl_cpu, 0), "engine_create"));
    SVM_RETURN_IF_ERROR(check(dnnl_stream_create(&stream_, engine_, dnnl_stream_default_flags), "stream_create"));
    // The last 2 + batch_rank canonical axes (a plain matmul stays 2-D).
    const int rank = 2 + problem_.batch_rank;
    auto md = [&](dnnl_memory_desc_t* desc, const View& view) {
      dnnl_dims_t dims = {}, steps = {};
      for (int d = 0; d < rank; ++d) {
        dims[d] = view.dims[kAxes - rank + d];
        steps[d] = view.strides[kAxes - rank + d];
      }
      denseWhereSingle(rank, dims, steps);
      return check(dnnl_memory_desc_init_by_strides(desc, rank, dims, type, steps), "memory_desc_init_by_strides");
    };
    std::vector<dnnl_memory_desc_t> descs(3);
    SVM_RETURN_IF_ERROR(md(&descs[0], problem_.a));
    SVM_RETURN_IF_ERROR(md(&descs[1], problem_.b));
    SVM_RETURN_IF_ERROR(md(&descs[2], problem_.c));
    exec_args_ = {{DNNL_ARG_SRC, nullptr}, {DNNL_ARG_WEIGHTS, nullptr}, {DNNL_ARG_DST, nullptr}};

    dnnl_post_ops_t post_ops = nullptr;
    dnnl_primitive_attr_t attr = nullptr;
    SVM_RETURN_IF_ERROR(check(dnnl_post_ops_create(&post_ops), "post_ops_create"));
    SVM_RETURN_IF_ERROR(check(dnnl_primitive_attr_create(&attr), "primitive_attr_create"));
    Status status = Status::ok();
    int index = 0;
    for (const Problem::Post& post : problem_.posts) {
      const PostOpKind* kind = postOpOf(post.op);
      if (!kind->binary) {
        status = check(dnnl_post_ops_append_eltwise(post_ops, 1.f, kind->alg, kind->alpha, kind->beta),
                       "post_ops_append_eltwise");
      } else {
        dnnl_memory_desc_t desc;
        status = md(&desc, post.view);
        if (status.isOk())
          status = check(dnnl_post_ops_append_binary(post_ops, kind->alg, &desc), "post_ops_append_binary");
        descs.push_back(desc);
        exec_args_.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, nullptr});
      }
      if (!status.isOk()) break;
      ++index;
    }
    if (status.isOk()) status = check(dnnl_primitive_attr_set_post_ops(attr, post_ops), "primitive_attr_set_post_ops");
    dnnl_matmul_desc_t desc;
    if (status.isOk())
      status = check(dnnl_matmul_desc_init(&desc, &descs[0], &descs[1], nullptr, &descs[2]), "matmul_desc_init");
    if (status.isOk()) {
      const OmpThreads threads(problem_.threads);  // an OpenMP build sizes its blocking for its threads
      status = check(dnnl_primitive_desc_create(&pd_, &desc, attr, engine_, nullptr),
                     "primitive_desc_create (no implementation for this dtype, layout or CPU)");
    }
    dnnl_primitive_attr_destroy(attr);
    dnnl_post_ops_destroy(post_ops);
    SVM_RETURN_IF_ERROR(status);
    SVM_RETURN_IF_ERROR(check(dnnl_primitive_create(&primitive_, pd_), "primitive_create"));
    for (std::size_t i = 0; i < descs.size(); ++i) {
      dnnl_memory_t memory = nullptr;
      SVM_RETURN_IF_ERROR(check(dnnl_memory_create(&memory, &descs[i], engine_, DNNL_MEMORY_NONE), "memory_create"));
      memories_.push_back(memory);
      exec_args_[i].memory = memory;
    }
    return Status::ok();
  }

  Problem problem_;
  std::mutex mutex_;  // one execution at a time (data handles are set per call)
  dnnl_engine_t engine_ = nullptr;
  dnnl_stream_t stream_ = nullptr;
  dnnl_primitive_desc_t pd_ = nullptr;
  dnnl_primitive_t primitive_ = nullptr;
  std::vector<dnnl_memory_t> memories_;
  std::vector<dnnl_exec_arg_t> exec_args_;
};
std::atomic<bool> Primitive::fail_for_testing_{false};

struct Cache {
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<Primitive>> primitives;
  std::map<std::string, std::string> failures;  // keys oneDNN could not create, with the reason
  std::atomic<std::uint64_t> calls{0}, run_failures{0};
  double create_ms = 0;
};
Cache& cache() {
  static Cache* cache = new Cache();  // never destroyed: kernels may run during static destruction
  return *cache;
}

Expected<Primitive*> findOrCreate(const Problem& problem) {
  const std::string key = problem.toString();
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (auto found = c.primitives.find(key); found != c.primitives.end()) return found->second.get();
  if (auto failed = c.failures.find(key); failed != c.failures.end())
    return makeError(ErrorCode::Unsupported, "{}", failed->second);
  if (c.primitives.size() >= kMaxPrimitives)
    return makeError(ErrorCode::Unsupported, "oneDNN matmul: {} primitives cached already", kMaxPrimitives);
  const auto start = std::chrono::steady_clock::now();
  Expected<std::unique_ptr<Primitive>> created = Primitive::create(problem);
  c.create_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!created) {
    std::string reason = fmt::format("oneDNN matmul {}: {}", key, created.status().message());
    c.failures.emplace(key, reason);
    return makeError(ErrorCode::Unsupported, "{}", reason);
  }
  Primitive* primitive = created->get();
  c.primitives.emplace(key, std::move(*created));
  return primitive;
}

// The problem's static part: dtype, the epilogue's post-ops (operand dims/strides filled later).
Problem problemOf(const KernelSpec& spec) {
  Problem problem;
  problem.dtype = spec.inputs[0].dtype;
  problem.out_slot = static_cast<int>(spec.inputs.size());
  for (const EpilogueStep& step : spec.epilogue) problem.posts.push_back({step.op, step.operand, {}});
  return problem;
}

// What the primitive computes, in double per element: the fallback when oneDNN refuses at run time.
double applyStep(OpId op, double v, double x) {
  switch (op) {
    case OpId::Relu: return v > 0 ? v : 0;
    case OpId::Tanh: return std::tanh(v);
    case OpId::Sigmoid: return 1.0 / (1.0 + std::exp(-v));
    case OpId::Gelu: return 0.5 * v * std::erfc(-v * 0.70710678118654752440);
    case OpId::Exp: return std::exp(v);
    case OpId::Log: return std::log(v);
    case OpId::Sqrt: return std::sqrt(v);
    case OpId::Abs: return std::fabs(v);
    case OpId::Silu: return v / (1.0 + std::exp(-v));
    case OpId::Neg: return -v;
    case OpId::Add: return v + x;
    case OpId::Sub: return v - x;
    case OpId::Mul: return v * x;
    case OpId::Div: return v / x;
    case OpId::Maximum: return std::max(v, x);
    case OpId::Minimum: return std::min(v, x);
    default: return v;
  }
}

void fallbackMatmul(const Problem& p, const KernelArgs& args) {
  for (std::int64_t b0 = 0; b0 < p.batch[0]; ++b0) {
    for (std::int64_t b1 = 0; b1 < p.batch[1]; ++b1) {
      for (std::int64_t i = 0; i < p.m; ++i) {
        for (std::int64_t j = 0; j < p.n; ++j) {
          double sum = 0;
          for (std::int64_t q = 0; q < p.k; ++q) {
            sum += loadAsDouble(args.data[0], p.dtype, p.a.at(b0, b1, i, q)) *
                   loadAsDouble(args.data[1], p.dtype, p.b.at(b0, b1, q, j));
          }
          // Post-ops act on float32 values, as oneDNN's do.
          double v = static_cast<float>(sum);
          for (const Problem::Post& post : p.posts) {
            const double x =
                post.operand < 0 ? 0.0 : loadAsDouble(args.data[post.operand], p.dtype, post.view.at(b0, b1, i, j));
            v = static_cast<float>(applyStep(post.op, v, x));
          }
          storeFromDouble(args.data[p.out_slot], p.dtype, p.c.at(b0, b1, i, j), v);
        }
      }
    }
  }
}

}  // namespace

bool available() {
  return Tunables::get(Tunable::LibraryCandidates) != 0;
}

Status expressible(const KernelSpec& spec) {
  auto no = [&](std::string_view why) {
    return makeError(ErrorCode::Unsupported, "no oneDNN matmul for {}: {}", spec.signature(), why);
  };
  if (spec.op != OpId::MatMul || spec.inputs.size() < 2) return no("not a matmul");
  if (spec.fused != nullptr) return no("a gate epilogue program");
  const OperandSpec& a = spec.inputs[0];
  const OperandSpec& b = spec.inputs[1];
  if (!a.is_tensor || !b.is_tensor || a.rank < 2 || b.rank < 2 || a.rank > kAxes || b.rank > kAxes)
    return no("operands are not matrices or stacks of up to two batch axes of them");
  if (a.dtype != b.dtype || !dnnlType(a.dtype)) return no("operands of different or unsupported dtypes");
  for (const EpilogueStep& step : spec.epilogue) {
    const PostOpKind* kind = postOpOf(step.op);
    if (kind == nullptr || kind->binary != (step.operand >= 0))
      return no(fmt::format("{} is no post-op", opIdent(step.op)));
    if (step.swapped && !commutes(step.op))
      return no(fmt::format("{} with the product on the right", opIdent(step.op)));
    if (step.operand >= 0 && spec.inputs[static_cast<std::size_t>(step.operand)].rank > std::max(a.rank, b.rank))
      return no("an epilogue operand of a higher rank than the product");
  }
  return Status::ok();
}

Status createFor(const KernelSpec& spec) {
  SVM_RETURN_IF_ERROR(expressible(spec));
  const OperandSpec& a = spec.inputs[0];
  const OperandSpec& b = spec.inputs[1];
  const matmul::MatmulDims dims = matmul::staticDims(spec);
  if (dims.m < 0 || dims.k < 0 || dims.n < 0 || !a.contiguous || !b.contiguous || a.rank > 2 || b.rank > 2)
    return Status::ok();  // at the first call (batched problems too: their views come from prepare())
  Problem problem = problemOf(spec);
  problem.m = dims.m, problem.k = dims.k, problem.n = dims.n;
  problem.a.dims[2] = dims.m, problem.a.dims[3] = dims.k, problem.a.strides[2] = dims.k, problem.a.strides[3] = 1;
  problem.b.dims[2] = dims.k, problem.b.dims[3] = dims.n, problem.b.strides[2] = dims.n, problem.b.strides[3] = 1;
  problem.c.dims[2] = dims.m, problem.c.dims[3] = dims.n, problem.c.strides[2] = dims.n, problem.c.strides[3] = 1;
  std::int64_t out_dims[kAxes];
  problem.outDims(out_dims);
  // As MatmulFamily::prepare() sizes the call's tasks.
  const std::int64_t work = dims.m * dims.k * dims.n;
  const std::int64_t b_bytes = dims.k * dims.n * static_cast<std::int64_t>(dtypeSize(b.dtype));
  const bool parallel = work >= matmul::kMinParallelWork ||
                        (work >= matmul::kMinParallelWork / 8 && b_bytes >= matmul::kMinParallelBytesOfB);
  problem.threads = parallel ? std::max(1, kernelThreads()) : 1;
  for (Problem::Post& post : problem.posts) {
    if (post.operand < 0) continue;
    const OperandSpec& x = spec.inputs[static_cast<std::size_t>(post.operand)];
    if (!x.contiguous) return Status::ok();
    std::int64_t stride = 1, strides[kAxes] = {0, 0, 0, 0};
    for (int d = x.rank - 1; d >= 0; --d) {
      if (!x.dims[d].isStatic()) return Status::ok();
      const int out_axis = kAxes - x.rank + d;
      if (x.dims[d].size != 1) strides[out_axis] = stride;
      stride *= x.dims[d].size;
    }
    post.view = viewOf(out_dims, strides);
  }
  return findOrCreate(problem).takeStatus();
}

Status prepareCall(const KernelSpec& spec, KernelArgs& args) {
  Problem problem = problemOf(spec);
  const int sa = matmul::slotA(spec), sb = matmul::slotB(spec);
  // prepare()'s canonical views: [batch0, batch1, rows, cols], batch strides 0 where broadcast.
  problem.batch_rank = std::max(spec.inputs[0].rank, spec.inputs[1].rank) - 2;
  problem.batch[0] = args.shape[sa][0], problem.batch[1] = args.shape[sa][1];
  problem.m = args.shape[sa][2], problem.k = args.shape[sa][3], problem.n = args.shape[sb][3];
  std::int64_t out_dims[kAxes];
  problem.outDims(out_dims);
  const std::int64_t a_dims[kAxes] = {problem.batch[0], problem.batch[1], problem.m, problem.k};
  const std::int64_t b_dims[kAxes] = {problem.batch[0], problem.batch[1], problem.k, problem.n};
  problem.a = viewOf(a_dims, args.strides[sa]);
  problem.b = viewOf(b_dims, args.strides[sb]);
  problem.a.dims[2] = problem.m, problem.a.dims[3] = problem.k;  // a stride-0 row or column is still m or k long
  problem.b.dims[2] = problem.k, problem.b.dims[3] = problem.n;
  // The output is given at its own rank (left-aligned): the last 2 + batch_rank canonical axes.
  const int out_rank = 2 + problem.batch_rank;
  std::int64_t c_strides[kAxes] = {0, 0, 0, 0};
  for (int d = 0; d < out_rank; ++d) c_strides[kAxes - out_rank + d] = args.strides[problem.out_slot][d];
  problem.c = viewOf(out_dims, c_strides);
  for (int d = 0; d < kAxes; ++d) problem.c.dims[d] = out_dims[d];
  problem.threads = static_cast<int>(std::max<std::int64_t>(1, args.scalars[matmul::kScalarTasks]));
  if (problem.m <= 0 || problem.k <= 0 || problem.n <= 0 || problem.batch[0] <= 0 || problem.batch[1] <= 0)
    return makeError(ErrorCode::Unsupported, "oneDNN matmul: empty product {}x{}x{}x{}x{}", problem.batch[0],
                     problem.batch[1], problem.m, problem.k, problem.n);
  for (Problem::Post& post : problem.posts) {
    if (post.operand >= 0) post.view = viewOf(out_dims, args.strides[post.operand]);
  }
  if (problem.threads > 1) {
    static std::once_flag once;
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    if (policy == nullptr || std::string_view(policy) != "passive") {
      std::call_once(once, [] {
        logAt(LogLevel::Info, "JIT",
              "oneDNN matmuls run on several OpenMP threads, whose idle threads spin after each call; set "
              "OMP_WAIT_POLICY=passive so they leave the interpreter's core alone");
      });
    }
  }
  SVM_ASSIGN_OR_RETURN(Primitive * primitive, findOrCreate(problem));
  args.scalars[matmul::kScalarLibrary] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(primitive));
  return Status::ok();
}

void runLibraryMatmul(void* /*part*/, const KernelArgs* args, std::int64_t /*tasks*/, std::int64_t /*scratch_bytes*/) {
  auto* primitive = reinterpret_cast<Primitive*>(static_cast<std::uintptr_t>(args->scalars[matmul::kScalarLibrary]));
  Cache& c = cache();
  c.calls.fetch_add(1, std::memory_order_relaxed);
  std::string reason;
  if (primitive->run(*args, &reason)) return;
  c.run_failures.fetch_add(1, std::memory_order_relaxed);
  static std::once_flag once;
  std::call_once(once, [&] {
    logAt(LogLevel::Warn, "JIT", "oneDNN matmul {} failed at run time ({}); computed by the fallback loop",
          primitive->problem().toString(), reason);
  });
  fallbackMatmul(primitive->problem(), *args);
}

LibraryStats stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return {c.primitives.size(), c.create_ms, c.calls.load(), c.run_failures.load()};
}

void failExecutionsForTesting(bool fail) {
  Primitive::fail_for_testing_.store(fail, std::memory_order_relaxed);
}

}  // namespace shapevm::jit::onednn
