// SPDX-License-Identifier: Apache-2.0
// oneDNN matmul primitives for the matmul family's library candidates (see library_onednn.h):
// the post-op table, the primitive cache, the runners and the scalar fallback, and the IR of a
// library = 2 kernel's generated tail.
#include "jit/llvm_cpu/library_onednn.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Intrinsics.h>
#include <oneapi/dnnl/dnnl.h>

#include "jit/fusion.h"
#include "jit/llvm_cpu/codegen_math.h"
#include "jit/llvm_cpu/codegen_util.h"
#include "jit/llvm_cpu/library_cache.h"
#include "jit/llvm_cpu/matmul_plan.h"
#include "jit/validate.h"
#include "support/cpu_cores.h"
#include "support/logging.h"
#include "support/thread_pool.h"
#include "support/tunables.h"

namespace shapevm::jit::onednn {

namespace {

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

using library::check;

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
  bool operator==(const View&) const = default;
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
    bool operator==(const Post&) const = default;
  };
  std::vector<Post> posts;  // the epilogue's leading steps that are post-ops (postOpSteps)
  int out_slot = 0;
  bool temp = false;   // C is the thread's tail buffer (a gate program's product), dense
  bool sgemm = false;  // dnnl_sgemm per matrix (library = 3, 4), not the matmul primitive
  bool packed_b = false;  // B in the layout oneDNN chooses (a packed copy), not where it is
  int threads = 1;
  std::string toString() const {
    // The output's slot too: a tail's operands that are no post-ops leave the key alone but move it.
    std::string key =
        fmt::format("{}{} {}x{}x{} b{}:{}x{} a{} b{}{} c{}{} o{} t{}", sgemm ? "sgemm " : "", dtypeShortName(dtype), m,
                    k, n, batch_rank, batch[0], batch[1], a.toString(), b.toString(), packed_b ? " packed" : "",
                    c.toString(), temp ? " tmp" : "", out_slot, threads);
    for (const Post& post : posts) {
      key += fmt::format(" {}", opIdent(post.op));
      if (post.operand >= 0) key += fmt::format("[{}]", post.view.toString());
    }
    return key;
  }
  bool operator==(const Problem&) const = default;
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
    if (reorder_ != nullptr) dnnl_primitive_destroy(reorder_);
    if (reorder_pd_ != nullptr) dnnl_primitive_desc_destroy(reorder_pd_);
    if (plain_b_ != nullptr) dnnl_memory_destroy(plain_b_);
    for (dnnl_memory_t memory : memories_) dnnl_memory_destroy(memory);
    if (scratchpad_ != nullptr) dnnl_memory_destroy(scratchpad_);
    if (primitive_ != nullptr) dnnl_primitive_destroy(primitive_);
    if (pd_ != nullptr) dnnl_primitive_desc_destroy(pd_);
    if (stream_ != nullptr) dnnl_stream_destroy(stream_);
    if (engine_ != nullptr) dnnl_engine_destroy(engine_);
  }
  // Runs on these operands into `dst`, B read from `packed_b` (a packed-B primitive's, in its
  // layout) when given; false (with the reason) when oneDNN refuses.
  bool run(const KernelArgs& args, void* dst, const void* packed_b, std::string* reason) {
    if (problem_.sgemm) return runSgemm(args, dst, reason);
    std::lock_guard<std::mutex> lock(mutex_);
    void* pointers[2 + kMaxKernelOperands];
    std::size_t count = 0;
    pointers[count++] = args.data[0];
    pointers[count++] = packed_b != nullptr ? const_cast<void*>(packed_b) : args.data[1];
    pointers[count++] = dst;
    for (const Problem::Post& post : problem_.posts) {
      if (post.operand >= 0) pointers[count++] = args.data[post.operand];
    }
    Status status = Status::ok();
    for (std::size_t i = 0; i < count && status.isOk(); ++i)
      status = check(dnnl_memory_set_data_handle(memories_[i], pointers[i]), "memory_set_data_handle");
    if (status.isOk() && scratchpad_ != nullptr) {
      // The calling thread's buffer (its own, not the tail's product buffer).
      void* buffer = ir::threadBuffer<ScratchpadTag>(scratchpad_bytes_, std::int64_t{1} << 16);
      status = buffer != nullptr ? check(dnnl_memory_set_data_handle(scratchpad_, buffer), "memory_set_data_handle")
                                 : makeError(ErrorCode::Unsupported, "no memory for oneDNN's scratchpad");
    }
    if (status.isOk() && fail_for_testing_.load(std::memory_order_relaxed))
      status = check(dnnl_runtime_error, "primitive_execute");
    if (status.isOk()) {
      const library::OmpThreads threads(problem_.threads);
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

  // The same problem with B in the layout oneDNN chose for it (Problem::packed_b), made on the
  // first ask: a single-matrix B of a primitive (not sgemm) whose chosen layout is not B's own.
  // nullptr otherwise, when oneDNN cannot make it, or once the cache is half full.
  Primitive* packedTwin();
  // packedTwin() if it was made already (never makes it).
  Primitive* packedTwinIfMade() const { return twin_.load(std::memory_order_acquire); }
  // True when oneDNN implements it on its internal sgemm ("gemm:jit", as for an A whose rows are
  // further apart than K): that code is generated at the process's first sgemm, not at creation.
  bool onSgemm() const {
    const char* impl = nullptr;
    if (pd_ == nullptr || dnnl_primitive_desc_query(pd_, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
        impl == nullptr)
      return false;
    return std::string_view(impl).starts_with("gemm:");
  }
  // A packed-B primitive's packed B: a header (the layout's memory descriptor), then B in it.
  static constexpr std::int64_t kPackedHeader = static_cast<std::int64_t>((sizeof(dnnl_memory_desc_t) + 63) / 64 * 64);
  std::int64_t packedBytes() const { return kPackedHeader + weights_bytes_; }
  // True when `packed` holds B in this packed-B primitive's layout (pack() succeeded for it).
  bool reads(const std::byte* packed) const {
    dnnl_memory_desc_t header;
    std::memcpy(&header, packed, sizeof(header));
    return dnnl_memory_desc_equal(&header, &weights_md_) != 0;
  }
  // A packed-B primitive: the call's B reordered into `packed` after its header, which then names
  // the layout (left naming none when oneDNN refuses: calls then read B where it is).
  bool pack(const KernelArgs& args, std::byte* packed, std::string* reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::memset(packed, 0, static_cast<std::size_t>(kPackedHeader));
    Status status = check(dnnl_memory_set_data_handle(plain_b_, args.data[1]), "memory_set_data_handle");
    if (status.isOk())
      status = check(dnnl_memory_set_data_handle(memories_[1], packed + kPackedHeader), "memory_set_data_handle");
    if (status.isOk() && fail_for_testing_.load(std::memory_order_relaxed))
      status = check(dnnl_runtime_error, "reorder execute");
    if (status.isOk()) {
      const library::OmpThreads threads(problem_.threads);
      const dnnl_exec_arg_t reorder_args[2] = {{DNNL_ARG_FROM, plain_b_}, {DNNL_ARG_TO, memories_[1]}};
      status = check(dnnl_primitive_execute(reorder_, stream_, 2, reorder_args), "reorder execute");
    }
    if (status.isOk()) status = check(dnnl_stream_wait(stream_), "stream_wait");
    if (!status.isOk()) {
      *reason = status.message();
      return false;
    }
    std::memcpy(packed, &weights_md_, sizeof(weights_md_));
    return true;
  }

 private:
  explicit Primitive(Problem problem) : problem_(std::move(problem)) {}

  // A packed-B problem: B's descriptor becomes the layout the primitive chose (an error when that
  // is B's own: nothing to pack), with the reorder into it from B where the call has it.
  Status chooseWeightsLayout(std::vector<dnnl_memory_desc_t>& descs, const dnnl_memory_desc_t& plain_b) {
    const dnnl_memory_desc_t* chosen = dnnl_primitive_desc_query_md(pd_, dnnl_query_weights_md, 0);
    if (chosen == nullptr) return makeError(ErrorCode::Unsupported, "no weights memory descriptor to query");
    if (dnnl_memory_desc_equal(chosen, &plain_b) != 0)
      return makeError(ErrorCode::Unsupported, "B is in the primitive's layout already: nothing to pack");
    weights_md_ = *chosen;
    descs[1] = *chosen;
    weights_bytes_ = static_cast<std::int64_t>(dnnl_memory_desc_get_size(chosen));
    SVM_RETURN_IF_ERROR(check(dnnl_memory_create(&plain_b_, &plain_b, engine_, DNNL_MEMORY_NONE), "memory_create"));
    // The reorder's OpenMP team is sized now, from the nthreads ICV (pack() runs it as created):
    // a problem's own task count, so a one-task pack (validation's) starts no team to wait on.
    const library::OmpThreads threads(problem_.threads);
    SVM_RETURN_IF_ERROR(
        check(dnnl_reorder_primitive_desc_create(&reorder_pd_, &plain_b, engine_, chosen, engine_, nullptr),
              "reorder_desc_create"));
    return check(dnnl_primitive_create(&reorder_, reorder_pd_), "reorder_create");
  }

  // A row-major dnnl_sgemm operand: 'N' with its row stride as the leading dimension where its
  // columns are unit-stride, 'T' with its column stride where its rows are; a matrix of one row or
  // column takes either.
  struct GemmOperand {
    char trans = 'N';
    std::int64_t ld = 1;
  };
  static Expected<GemmOperand> gemmOperand(const View& view, const char* what) {
    const std::int64_t rows = view.dims[2], cols = view.dims[3];
    const std::int64_t row_step = view.strides[2], col_step = view.strides[3];
    if ((cols == 1 || col_step == 1) && (rows == 1 || row_step >= cols))
      return GemmOperand{'N', rows == 1 ? std::max<std::int64_t>(cols, 1) : row_step};
    if ((rows == 1 || row_step == 1) && (cols == 1 || col_step >= rows))
      return GemmOperand{'T', cols == 1 ? std::max<std::int64_t>(rows, 1) : col_step};
    return makeError(ErrorCode::Unsupported,
                     "dnnl_sgemm: {} is {}x{} with strides {}, {}, neither rows nor columns unit-stride apart", what,
                     rows, cols, row_step, col_step);
  }

  Status buildSgemm() {
    if (problem_.dtype != DType::Float32 || !problem_.posts.empty())
      return makeError(ErrorCode::Unsupported, "dnnl_sgemm: float32 without post-ops only");
    SVM_ASSIGN_OR_RETURN(gemm_a_, gemmOperand(problem_.a, "A"));
    SVM_ASSIGN_OR_RETURN(gemm_b_, gemmOperand(problem_.b, "B"));
    SVM_ASSIGN_OR_RETURN(gemm_c_, gemmOperand(problem_.c, "the output"));
    if (gemm_c_.trans != 'N') return makeError(ErrorCode::Unsupported, "dnnl_sgemm: the output's columns are strided");
    return Status::ok();
  }

  // Each matrix of the stack is one dnnl_sgemm call: a stack of at least `threads` matrices split
  // across the kernel pool's tasks (one OpenMP thread each), a smaller one in turn on `threads`.
  bool runSgemm(const KernelArgs& args, void* dst, std::string* reason) const {
    if (fail_for_testing_.load(std::memory_order_relaxed)) {
      *reason = check(dnnl_runtime_error, "sgemm").message();
      return false;
    }
    const Problem& p = problem_;
    const auto* a = static_cast<const float*>(args.data[0]);
    const auto* b = static_cast<const float*>(args.data[1]);
    auto* c = static_cast<float*>(dst);
    const std::int64_t batches = p.batch[0] * p.batch[1];
    std::atomic<int> failed{dnnl_success};
    auto matrices = [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        const std::int64_t b0 = i / p.batch[1], b1 = i % p.batch[1];
        const dnnl_status_t status =
            dnnl_sgemm(gemm_a_.trans, gemm_b_.trans, p.m, p.n, p.k, 1.f, a + p.a.at(b0, b1, 0, 0), gemm_a_.ld,
                       b + p.b.at(b0, b1, 0, 0), gemm_b_.ld, 0.f, c + p.c.at(b0, b1, 0, 0), gemm_c_.ld);
        if (status != dnnl_success) failed.store(status, std::memory_order_relaxed);
      }
    };
    const int tasks = p.threads;
    if (tasks > 1 && batches >= tasks) {
      const std::int64_t share = (batches + tasks - 1) / tasks;
      ThreadPool::global().run(tasks, [&](int task) {
        const library::OmpThreads one(1);
        matrices(std::min(batches, task * share), std::min(batches, (task + 1) * share));
      });
    } else {
      const library::OmpThreads threads(tasks);
      matrices(0, batches);
    }
    const int status = failed.load(std::memory_order_relaxed);
    if (status != dnnl_success) *reason = check(static_cast<dnnl_status_t>(status), "sgemm").message();
    return status == dnnl_success;
  }

  Status build() {
    if (problem_.sgemm) return buildSgemm();
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
    dnnl_memory_desc_t plain_b;
    SVM_RETURN_IF_ERROR(md(&descs[0], problem_.a));
    SVM_RETURN_IF_ERROR(md(&plain_b, problem_.b));
    SVM_RETURN_IF_ERROR(md(&descs[2], problem_.c));
    descs[1] = plain_b;
    if (problem_.packed_b) {
      dnnl_dims_t dims = {};
      for (int d = 0; d < rank; ++d) dims[d] = problem_.b.dims[kAxes - rank + d];
      SVM_RETURN_IF_ERROR(check(dnnl_memory_desc_init_by_tag(&descs[1], rank, dims, type, dnnl_format_tag_any),
                                "memory_desc_init_by_tag"));
    }
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
    // The scratchpad is the calling thread's buffer (run()), not oneDNN's process-wide one, which
    // distinct primitives running at once on different threads would share (the conv primitive's
    // crashed that way beside torch: library_onednn_conv.cc).
    if (status.isOk())
      status = check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "set_scratchpad_mode");
    dnnl_matmul_desc_t desc;
    if (status.isOk())
      status = check(dnnl_matmul_desc_init(&desc, &descs[0], &descs[1], nullptr, &descs[2]), "matmul_desc_init");
    if (status.isOk()) {
      const library::OmpThreads threads(problem_.threads);  // an OpenMP build sizes its blocking for its threads
      status = check(dnnl_primitive_desc_create(&pd_, &desc, attr, engine_, nullptr),
                     "primitive_desc_create (no implementation for this dtype, layout or CPU)");
    }
    dnnl_primitive_attr_destroy(attr);
    dnnl_post_ops_destroy(post_ops);
    SVM_RETURN_IF_ERROR(status);
    if (problem_.packed_b) SVM_RETURN_IF_ERROR(chooseWeightsLayout(descs, plain_b));
    // The primitive's OpenMP team is sized as it is made (run() executes it as created; the conv
    // primitive made for 2 threads and run on 1 computed wrong border pixels: library_onednn_conv.cc).
    const library::OmpThreads threads(problem_.threads);
    SVM_ASSIGN_OR_RETURN(scratchpad_bytes_,
                         library::createPrimitive(engine_, pd_, descs, primitive_, memories_, exec_args_, scratchpad_));
    return Status::ok();
  }

  struct ScratchpadTag {};
  Problem problem_;
  GemmOperand gemm_a_, gemm_b_, gemm_c_;  // sgemm: how A, B and C are passed
  std::mutex mutex_;  // one execution at a time (data handles are set per call)
  dnnl_engine_t engine_ = nullptr;
  dnnl_stream_t stream_ = nullptr;
  dnnl_primitive_desc_t pd_ = nullptr;
  dnnl_primitive_t primitive_ = nullptr;
  std::vector<dnnl_memory_t> memories_;
  std::vector<dnnl_exec_arg_t> exec_args_;
  dnnl_memory_t scratchpad_ = nullptr;  // its data: the calling thread's ScratchpadTag buffer
  std::int64_t scratchpad_bytes_ = 0;
  // A packed-B problem: the layout chosen for B, its size, and the reorder into it from B.
  dnnl_memory_desc_t weights_md_{};
  std::int64_t weights_bytes_ = 0;
  dnnl_primitive_desc_t reorder_pd_ = nullptr;
  dnnl_primitive_t reorder_ = nullptr;
  dnnl_memory_t plain_b_ = nullptr;  // B where the call has it (its handle set per pack)
  // A plain problem: its packed-B twin (packedTwin()).
  std::once_flag twin_once_;
  std::atomic<Primitive*> twin_{nullptr};
};
std::atomic<bool> Primitive::fail_for_testing_{false};

struct Cache {
  library::PrimitiveCache<Problem, Primitive> primitives{"oneDNN matmul", kMaxPrimitives};
  std::atomic<std::uint64_t> calls{0}, run_failures{0}, tail_calls{0}, sgemm_calls{0}, b_packs{0}, packed_calls{0};
};
Cache& cache() {
  static Cache* cache = new Cache();  // never destroyed: kernels may run during static destruction
  return *cache;
}

Expected<Primitive*> findOrCreate(const Problem& problem) {
  return cache().primitives.findOrCreate(problem);
}

// findOrCreate() through the calling thread's last few problems: a call that repeats one (a
// kernel called again on the same shapes) skips formatting the key and the cache's lock.
Expected<Primitive*> findRecent(const Problem& problem) {
  struct Recent {
    Problem problem;
    Primitive* primitive = nullptr;
  };
  constexpr std::size_t kRecent = 4;
  thread_local std::vector<Recent> recent;
  thread_local std::size_t next = 0;
  for (const Recent& r : recent) {
    if (r.problem == problem) return r.primitive;
  }
  SVM_ASSIGN_OR_RETURN(Primitive * primitive, findOrCreate(problem));
  if (recent.size() < kRecent) {
    recent.push_back({problem, primitive});
  } else {
    recent[next] = {problem, primitive};
    next = (next + 1) % kRecent;
  }
  return primitive;
}

Primitive* Primitive::packedTwin() {
  std::call_once(twin_once_, [&] {
    if (problem_.sgemm || problem_.packed_b || problem_.batch_rank != 0) return;
    // Half the cache stays for plain primitives: a kernel called on many shapes (every M of a
    // dynamic dim) must not run out of them because each also got a twin.
    if (cache().primitives.totals().primitives >= kMaxPrimitives / 2) return;
    Problem packed = problem_;
    packed.packed_b = true;
    auto found = findOrCreate(packed);
    if (found) twin_.store(*found, std::memory_order_release);
  });
  return twin_.load(std::memory_order_acquire);
}

// The tasks a 2-D problem's call gets with `threads` (as MatmulFamily::prepare() sizes them).
int callTasks(const Problem& p, int threads) {
  const std::int64_t work = p.m * p.k * p.n;
  const std::int64_t b_bytes = p.k * p.n * static_cast<std::int64_t>(dtypeSize(p.dtype));
  const bool parallel = work >= matmul::kMinParallelWork ||
                        (work >= matmul::kMinParallelWork / 8 && b_bytes >= matmul::kMinParallelBytesOfB);
  return parallel ? std::max(1, threads) : 1;
}

// On a thread preparing the program's calls (a validation run under a ProgramCallsScope): the
// primitive of `problem` (a 2-D one) and its packed-B twin at every row count the profile saw for
// its K and N and every task count of the program's thread. What oneDNN refuses is left to the
// call that meets it; so is everything once the cache is half full (as packedTwin(): the program's
// own calls must not run out of primitives). Deferred when the calls ask for it (ProgramCalls::defer:
// after validation); all of its CPU, lookups and twins included, counts as creation
// (threadCreateMs, which install records count as codegen).
void createForProgramNow(const Problem& problem, const ProgramCalls* calls);
void createForProgram(const Problem& problem) {
  const ProgramCalls* calls = ProgramCalls::current();
  if (calls == nullptr || problem.sgemm || problem.packed_b || problem.batch_rank != 0) return;
  if (calls->defer([problem] { createForProgramNow(problem, ProgramCalls::current()); })) return;
  createForProgramNow(problem, calls);
}

std::atomic<bool> g_sgemm_generated{false};  // generateSgemmKernels() ran

// oneDNN generates its sgemm's kernels (packing and compute, every transposition) at the
// process's first sgemm call (tens of ms of CPU on a loaded host). A primitive built on it runs
// that first call wherever it first executes: on the program's thread, unless this ran before. Run
// once, on the calling (compile) thread, at one task: a small sgemm of each transposition.
void generateSgemmKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    const library::OmpThreads threads(1);
    constexpr dnnl_dim_t kSide = 64;
    std::vector<float> a(kSide * kSide, 0.5f), b(kSide * kSide, 0.25f), c(kSide * kSide, 0.f);
    for (const char trans_a : {'N', 'T'}) {
      for (const char trans_b : {'N', 'T'}) {
        (void)dnnl_sgemm(trans_a, trans_b, kSide, kSide, kSide, 1.f, a.data(), kSide, b.data(), kSide, 0.f, c.data(),
                         kSide);
      }
    }
    g_sgemm_generated.store(true, std::memory_order_release);
  });
}

// `problem` (a 2-D one) in one of the program's layouts at one task count of the program's thread.
Problem layoutProblem(const Problem& problem, const ProgramCalls::Matmul::Layout& layout, int threads) {
  Problem call = problem;
  call.m = layout.m;
  call.a.dims[2] = layout.m;
  call.c.dims[2] = layout.m;
  call.a.strides[2] = layout.a[0], call.a.strides[3] = layout.a[1];
  call.b.strides[2] = layout.b[0], call.b.strides[3] = layout.b[1];
  for (Problem::Post& post : call.posts) post.view.dims[2] = post.view.strides[2] != 0 ? layout.m : 1;
  call.threads = callTasks(call, threads);
  return call;
}

void createForProgramNow(const Problem& problem, const ProgramCalls* calls) {
  if (calls == nullptr) return;
  const double start = library::threadCpuNowMs();
  const double created_before = library::threadCreateMs();
  struct CountAll {
    double start, created_before;
    ~CountAll() {
      // What findOrCreate() counted already, plus the rest (keys, lookups, the loop).
      const double counted = library::threadCreateMs() - created_before;
      library::threadCreateMs() += std::max(0.0, library::threadCpuNowMs() - start - counted);
    }
  } count_all{start, created_before};
  const bool twin = Tunables::get(Tunable::PackedWeightEntries) > 0 &&
                    problem.k * problem.n >= Tunables::get(Tunable::PackedWeightMinElements);
  for (const ProgramCalls::Matmul& matmul : calls->matmuls) {
    if (matmul.k != problem.k || matmul.n != problem.n) continue;
    // The program's own layouts (a transposed weight, a row slice of a wider A: each keys its own
    // primitive); a row count the profile gave no strides for in this (validation's) layout.
    std::vector<ProgramCalls::Matmul::Layout> layouts = matmul.layouts;
    for (const std::int64_t m : matmul.rows) {
      if (std::none_of(layouts.begin(), layouts.end(), [&](const auto& l) { return l.m == m; }))
        layouts.push_back(
            {m, {problem.a.strides[2], problem.a.strides[3]}, {problem.b.strides[2], problem.b.strides[3]}});
    }
    for (const ProgramCalls::Matmul::Layout& layout : layouts) {
      for (const int threads : calls->threads) {
        const Problem call = layoutProblem(problem, layout, threads);
        if (call == problem) continue;
        if (cache().primitives.totals().primitives >= kMaxPrimitives / 2) return;
        auto found = findOrCreate(call);
        if (found && twin) (void)(*found)->packedTwin();
        if (found && (*found)->onSgemm()) generateSgemmKernels();
      }
    }
  }
}

// Why `step` of `spec` is no post-op; empty when it is one.
std::string whyNoPostOp(const KernelSpec& spec, const EpilogueStep& step) {
  const PostOpKind* kind = postOpOf(step.op);
  if (kind == nullptr || kind->binary != (step.operand >= 0)) return fmt::format("{} is no post-op", opIdent(step.op));
  if (step.swapped && !commutes(step.op)) return fmt::format("{} with the product on the right", opIdent(step.op));
  if (step.operand >= 0 &&
      spec.inputs[static_cast<std::size_t>(step.operand)].rank > std::max(spec.inputs[0].rank, spec.inputs[1].rank))
    return "an epilogue operand of a higher rank than the product";
  return {};
}

// The problem's static part: dtype, the post-ops (operand dims/strides filled later), where C is.
Problem problemOf(const KernelSpec& spec) {
  Problem problem;
  problem.dtype = spec.inputs[0].dtype;
  problem.out_slot = static_cast<int>(spec.inputs.size());
  problem.temp = hasTail(spec.params) && matmul::gateEpilogue(spec);
  problem.sgemm = isSgemm(spec.params);
  const std::size_t posts = postOpSteps(spec);
  for (std::size_t s = 0; s < posts; ++s) problem.posts.push_back({spec.epilogue[s].op, spec.epilogue[s].operand, {}});
  return problem;
}

// The product a library = 2 kernel's tail reads: the output, or (a gate program) the thread's
// tail buffer of `bytes` (nullptr when it cannot be allocated).
struct TailBufferTag {};
void* tailBuffer(std::int64_t bytes) {
  return ir::threadBuffer<TailBufferTag>(bytes, std::int64_t{1} << 16);
}
std::int64_t productBytes(const Problem& p) {
  return p.batch[0] * p.batch[1] * p.m * p.n * static_cast<std::int64_t>(dtypeSize(p.dtype));
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

void fallbackMatmul(const Problem& p, const KernelArgs& args, void* dst) {
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
          storeFromDouble(dst, p.dtype, p.c.at(b0, b1, i, j), v);
        }
      }
    }
  }
}

// A packed B (usePackedB) is in scalars[kScalarPacked], the low bit set for PackMode::PackOnly
// (the buffer is 64-byte aligned); scalars[kScalarLibrary] holds the primitive.
constexpr int kScalarPacked = matmul::kScalarPackOnly;
constexpr std::uintptr_t kPackOnlyTag = 1;
const std::byte* packedBuffer(const KernelArgs& args) {
  return reinterpret_cast<const std::byte*>(static_cast<std::uintptr_t>(args.scalars[kScalarPacked]) & ~kPackOnlyTag);
}

// A PackMode::PackOnly call: B reordered into the packed buffer by the primitive's packed-B twin,
// nothing computed (true). False for any other call.
bool packOnly(Primitive* primitive, const KernelArgs& args) {
  if ((static_cast<std::uintptr_t>(args.scalars[kScalarPacked]) & kPackOnlyTag) == 0) return false;
  Primitive* twin = primitive->packedTwinIfMade();
  auto* packed = const_cast<std::byte*>(packedBuffer(args));
  std::string reason;
  if (twin != nullptr && packed != nullptr && twin->pack(args, packed, &reason)) {
    cache().b_packs.fetch_add(1, std::memory_order_relaxed);
  } else {
    logAt(LogLevel::Info, "JIT", "oneDNN matmul {}: packing B failed ({}); calls read B where it is",
          primitive->problem().toString(), reason.empty() ? "no packed-B primitive" : reason);
  }
  return true;
}

// The primitive on `args` into `dst`; the fallback loop when oneDNN refuses (logged once).
void execute(Primitive* primitive, const KernelArgs& args, void* dst) {
  Cache& c = cache();
  c.calls.fetch_add(1, std::memory_order_relaxed);
  if (primitive->problem().sgemm) c.sgemm_calls.fetch_add(1, std::memory_order_relaxed);
  std::string reason;
  // B packed for this primitive's packed-B twin (usePackedB, PackMode::Read): the twin reads it.
  const std::byte* packed = packedBuffer(args);
  if (Primitive* twin = primitive->packedTwinIfMade(); twin != nullptr && packed != nullptr && twin->reads(packed)) {
    c.packed_calls.fetch_add(1, std::memory_order_relaxed);
    if (twin->run(args, dst, packed + Primitive::kPackedHeader, &reason)) return;
  } else if (primitive->run(args, dst, nullptr, &reason)) {
    return;
  }
  c.run_failures.fetch_add(1, std::memory_order_relaxed);
  static std::once_flag once;
  std::call_once(once, [&] {
    logAt(LogLevel::Warn, "JIT", "oneDNN matmul {} failed at run time ({}); computed by the fallback loop",
          primitive->problem().toString(), reason);
  });
  fallbackMatmul(primitive->problem(), args, dst);
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
  const OperandSpec& a = spec.inputs[0];
  const OperandSpec& b = spec.inputs[1];
  if (!a.is_tensor || !b.is_tensor || a.rank < 2 || b.rank < 2 || a.rank > kAxes || b.rank > kAxes)
    return no("operands are not matrices or stacks of up to two batch axes of them");
  if (a.dtype != b.dtype || !dnnlType(a.dtype)) return no("operands of different or unsupported dtypes");
  if (isSgemm(spec.params) && a.dtype != DType::Float32) return no("dnnl_sgemm takes float32 operands only");
  if (spec.params.library == kSgemmAndTail) {
    if (spec.fused == nullptr && spec.epilogue.empty()) return no("no epilogue: no tail (impl=sgemm)");
    return Status::ok();
  }
  if (spec.params.library == kPrimitiveAndTail) {
    if (spec.fused == nullptr && postOpSteps(spec) == spec.epilogue.size())
      return no("post-ops express the whole epilogue: no tail (impl=onednn)");
    return Status::ok();
  }
  if (spec.fused != nullptr) return no("a gate epilogue program");
  if (spec.params.library == kSgemm && !spec.epilogue.empty()) return no("dnnl_sgemm has no post-ops");
  for (const EpilogueStep& step : spec.epilogue) {
    if (std::string why = whyNoPostOp(spec, step); !why.empty()) return no(why);
  }
  return Status::ok();
}

std::size_t postOpSteps(const KernelSpec& spec) {
  if (isSgemm(spec.params)) return 0;
  std::size_t steps = 0;
  while (steps < spec.epilogue.size() && whyNoPostOp(spec, spec.epilogue[steps]).empty()) ++steps;
  return steps;
}

std::vector<KernelParams> candidates(const KernelSpec& spec) {
  if (!available()) return {};
  std::vector<KernelParams> found;
  // The primitive (alone where it can be), then sgemm (alone where it can be).
  for (const auto& pair : {std::pair{kPrimitive, kPrimitiveAndTail}, std::pair{kSgemm, kSgemmAndTail}}) {
    for (const int library : {pair.first, pair.second}) {
      KernelSpec candidate = spec;
      candidate.params = {.library = library};
      if (expressible(candidate).isOk()) {
        found.push_back(candidate.params);
        break;
      }
    }
  }
  return found;
}

bool sgemmKernelsGenerated() {
  return g_sgemm_generated.load(std::memory_order_acquire);
}

namespace {

// `spec`'s problem at M x K x N on dense row-major operands.
Problem denseProblem(const KernelSpec& spec, std::int64_t m, std::int64_t k, std::int64_t n) {
  Problem problem = problemOf(spec);
  problem.m = m, problem.k = k, problem.n = n;
  problem.a.dims[2] = m, problem.a.dims[3] = k, problem.a.strides[2] = k, problem.a.strides[3] = 1;
  problem.b.dims[2] = k, problem.b.dims[3] = n, problem.b.strides[2] = n, problem.b.strides[3] = 1;
  problem.c.dims[2] = m, problem.c.dims[3] = n, problem.c.strides[2] = n, problem.c.strides[3] = 1;
  return problem;
}

// ProgramCalls::avoid_one_time_codegen: an error when one of the program's recorded layouts of
// `spec`'s K and N runs on oneDNN's sgemm while its kernels are not generated yet. Checked for 2-D
// problems whose post-ops read no operand (their views come with the call).
Status declineUngeneratedSgemm(const KernelSpec& spec, const matmul::MatmulDims& dims, const ProgramCalls& calls) {
  if (sgemmKernelsGenerated() || calls.threads.empty() || dims.k < 0 || dims.n < 0 || spec.inputs[0].rank > 2 ||
      spec.inputs[1].rank > 2)
    return Status::ok();
  const Problem problem = denseProblem(spec, 1, dims.k, dims.n);
  if (problem.sgemm) return Status::ok();
  for (const Problem::Post& post : problem.posts) {
    if (post.operand >= 0) return Status::ok();
  }
  for (const ProgramCalls::Matmul& matmul : calls.matmuls) {
    if (matmul.k != problem.k || matmul.n != problem.n) continue;
    for (const ProgramCalls::Matmul::Layout& layout : matmul.layouts) {
      auto found = findOrCreate(layoutProblem(problem, layout, calls.threads.front()));
      if (!found || !(*found)->onSgemm()) continue;
      return makeError(ErrorCode::Unsupported,
                       "oneDNN runs the program's layout (A {}x{} with rows {} apart, B strides {}, {}) on its "
                       "sgemm, whose code this process has not generated yet (tens of ms, once); untuned, the "
                       "generated kernel instead",
                       layout.m, problem.k, layout.a[0], layout.b[0], layout.b[1]);
    }
  }
  return Status::ok();
}

}  // namespace

Status createFor(const KernelSpec& spec) {
  SVM_RETURN_IF_ERROR(expressible(spec));
  const OperandSpec& a = spec.inputs[0];
  const OperandSpec& b = spec.inputs[1];
  const matmul::MatmulDims dims = matmul::staticDims(spec);
  if (const ProgramCalls* calls = ProgramCalls::current(); calls != nullptr && calls->avoid_one_time_codegen)
    SVM_RETURN_IF_ERROR(declineUngeneratedSgemm(spec, dims, *calls));
  if (dims.m < 0 || dims.k < 0 || dims.n < 0 || !a.contiguous || !b.contiguous || a.rank > 2 || b.rank > 2)
    return Status::ok();  // at the first call (batched problems too: their views come from prepare())
  Problem problem = denseProblem(spec, dims.m, dims.k, dims.n);
  std::int64_t out_dims[kAxes];
  problem.outDims(out_dims);
  problem.threads = callTasks(problem, kernelThreads());
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
  SVM_ASSIGN_OR_RETURN(Primitive * primitive, findOrCreate(problem));
  // Its packed-B twin too (packedB): compile time, not the first call's.
  if (Tunables::get(Tunable::PackedWeightEntries) > 0) (void)primitive->packedTwin();
  return Status::ok();
}

namespace {

// What prepareCall() reads, in one flat block compared whole: of the spec, what problemOf() and
// the canonical views depend on (its dtype, library, gate program, operand count and ranks, the
// epilogue's steps); of the call's arguments, A's and B's canonical views, the output's strides,
// every epilogue operand's strides and the task count. Never the data pointers: the primitive is
// made for layouts, and the call sets its data handles from the arguments each time.
struct PrepareKey {
  static constexpr int kSteps = 8;  // a longer epilogue is prepared afresh at every call
  std::int64_t spec[8];
  std::int64_t steps[kSteps][4];
  std::int64_t a_shape[kMaxRank], a_strides[kMaxRank], b_shape[kMaxRank], b_strides[kMaxRank];
  std::int64_t out_strides[kMaxRank];
  std::int64_t step_strides[kSteps][kMaxRank];
  std::int64_t tasks;
};

// Fills `key` for this call; false when it cannot be keyed (a longer epilogue).
bool prepareKey(const KernelSpec& spec, const KernelArgs& args, PrepareKey& key) {
  if (spec.epilogue.size() > static_cast<std::size_t>(PrepareKey::kSteps) || spec.inputs.size() < 2) return false;
  std::memset(&key, 0, sizeof(key));
  const int sa = matmul::slotA(spec), sb = matmul::slotB(spec);
  const auto out_slot = static_cast<int>(spec.inputs.size());
  if (sa < 0 || sb < 0 || sa >= kMaxKernelOperands || sb >= kMaxKernelOperands || out_slot >= kMaxKernelOperands)
    return false;
  const std::int64_t spec_part[8] = {static_cast<std::int64_t>(spec.inputs[0].dtype),
                                     spec.params.library,
                                     matmul::gateEpilogue(spec) ? 1 : 0,
                                     out_slot,
                                     spec.inputs[0].rank,
                                     spec.inputs[1].rank,
                                     sa,
                                     sb};
  std::memcpy(key.spec, spec_part, sizeof(spec_part));
  for (std::size_t s = 0; s < spec.epilogue.size(); ++s) {
    const EpilogueStep& step = spec.epilogue[s];
    if (step.operand >= kMaxKernelOperands ||
        (step.operand >= 0 && static_cast<std::size_t>(step.operand) >= spec.inputs.size()))
      return false;
    key.steps[s][0] = static_cast<std::int64_t>(step.op) + 1;
    key.steps[s][1] = step.operand;
    key.steps[s][2] = step.swapped ? 1 : 0;
    if (step.operand >= 0) {
      key.steps[s][3] = spec.inputs[static_cast<std::size_t>(step.operand)].rank;
      std::memcpy(key.step_strides[s], args.strides[step.operand], sizeof(key.step_strides[s]));
    }
  }
  std::memcpy(key.a_shape, args.shape[sa], sizeof(key.a_shape));
  std::memcpy(key.a_strides, args.strides[sa], sizeof(key.a_strides));
  std::memcpy(key.b_shape, args.shape[sb], sizeof(key.b_shape));
  std::memcpy(key.b_strides, args.strides[sb], sizeof(key.b_strides));
  std::memcpy(key.out_strides, args.strides[out_slot], sizeof(key.out_strides));
  key.tasks = args.scalars[matmul::kScalarTasks];
  return true;
}

// What a prepareCall() for a key found: the primitive, whether the tail runs, the tail buffer.
struct Prepared {
  PrepareKey key;
  Primitive* primitive = nullptr;  // cached primitives are never destroyed (library_cache.h)
  bool tail = false;
  std::int64_t temp_bytes = 0;  // > 0: the product goes to the thread's tail buffer of this size
};

// The calling thread's last few prepared calls: a kernel called again on the layouts of one of
// them (every call of a program after its first) skips making the Problem (a heap allocation for
// its post-ops), its views, findRecent()'s comparisons and createForProgram(). Threads preparing a
// program's calls for validation (ProgramCalls::current()) always prepare afresh.
class PreparedCalls {
 public:
  static constexpr std::size_t kEntries = 8;
  const Prepared* find(const PrepareKey& key) const {
    for (std::size_t e = 0; e < used_; ++e) {
      if (std::memcmp(&entries_[e].key, &key, sizeof(key)) == 0) return &entries_[e];
    }
    return nullptr;
  }
  void remember(const Prepared& prepared) {
    if (used_ < kEntries) {
      entries_[used_++] = prepared;
      return;
    }
    entries_[next_] = prepared;
    next_ = (next_ + 1) % kEntries;
  }

 private:
  Prepared entries_[kEntries];
  std::size_t used_ = 0, next_ = 0;
};

PreparedCalls& preparedCalls() {
  thread_local PreparedCalls calls;
  return calls;
}

std::atomic<std::uint64_t> prepare_hits{0};

// A remembered call's arguments: as prepareProblem() set them.
Status applyPrepared(const Prepared& prepared, KernelArgs& args) {
  args.scalars[matmul::kScalarLibrary] =
      static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(prepared.primitive));
  if (!prepared.tail) return Status::ok();
  if (prepared.temp_bytes > 0 && tailBuffer(prepared.temp_bytes) == nullptr)
    return makeError(ErrorCode::Unsupported, "oneDNN matmul with a tail: no memory for the {}-byte product",
                     prepared.temp_bytes);
  args.scalars[matmul::kScalarRunner] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&runLibraryTail));
  return Status::ok();
}

// prepareCall() without the thread's record: the Problem of this call, its primitive.
Status prepareProblem(const KernelSpec& spec, KernelArgs& args, Prepared& prepared) {
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
  // The tail reads the product dense: a gate program's in the tail buffer, else the output.
  const int out_rank = 2 + problem.batch_rank;
  std::int64_t c_strides[kAxes] = {0, 0, 0, 0};
  const bool tail = hasTail(spec.params);
  for (int d = 0; d < out_rank; ++d) {
    const int axis = kAxes - out_rank + d;
    c_strides[axis] = problem.temp ? 0 : args.strides[problem.out_slot][d];
    std::int64_t dense = 1;
    for (int e = axis + 1; e < kAxes; ++e) dense *= out_dims[e];
    if (problem.temp) c_strides[axis] = dense;
    if (tail && out_dims[axis] > 1 && c_strides[axis] != dense)
      return makeError(ErrorCode::Unsupported, "oneDNN matmul with a tail: the output is not dense");
  }
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
  SVM_ASSIGN_OR_RETURN(Primitive * primitive, findRecent(problem));
  createForProgram(problem);
  // The kernel usually runs on this thread right after prepare() (invokeCompiled): a tail's
  // buffer is grown here (applyPrepared), where a failure can still be returned.
  prepared.primitive = primitive;
  prepared.tail = tail;
  prepared.temp_bytes = tail && problem.temp ? productBytes(problem) : 0;
  return applyPrepared(prepared, args);
}

}  // namespace

Status prepareCall(const KernelSpec& spec, KernelArgs& args) {
  Prepared prepared;
  const bool keyed = ProgramCalls::current() == nullptr && prepareKey(spec, args, prepared.key);
  if (keyed) {
    if (const Prepared* found = preparedCalls().find(prepared.key)) {
      prepare_hits.fetch_add(1, std::memory_order_relaxed);
      return applyPrepared(*found, args);
    }
  }
  SVM_RETURN_IF_ERROR(prepareProblem(spec, args, prepared));
  if (keyed) preparedCalls().remember(prepared);
  return Status::ok();
}

void runLibraryMatmul(void* /*part*/, const KernelArgs* args, std::int64_t /*tasks*/, std::int64_t /*scratch_bytes*/) {
  auto* primitive = reinterpret_cast<Primitive*>(static_cast<std::uintptr_t>(args->scalars[matmul::kScalarLibrary]));
  if (packOnly(primitive, *args)) return;
  execute(primitive, *args, args->data[primitive->problem().out_slot]);
}

void runLibraryTail(void* part, const KernelArgs* args, std::int64_t tasks, std::int64_t /*scratch_bytes*/) {
  auto* primitive = reinterpret_cast<Primitive*>(static_cast<std::uintptr_t>(args->scalars[matmul::kScalarLibrary]));
  if (packOnly(primitive, *args)) return;
  const Problem& problem = primitive->problem();
  void* product = problem.temp ? tailBuffer(productBytes(problem)) : args->data[problem.out_slot];
  std::vector<std::byte> spill;  // prepared on another thread whose buffer this one lacks, and none to be had
  if (product == nullptr) {
    spill.resize(static_cast<std::size_t>(productBytes(problem)));
    product = spill.data();
  }
  execute(primitive, *args, product);
  cache().tail_calls.fetch_add(1, std::memory_order_relaxed);
  using TailFn = void (*)(const KernelArgs*, std::int64_t, std::int64_t, void*);
  const auto tail = reinterpret_cast<TailFn>(part);
  if (tasks <= 1) {
    tail(args, 0, 1, product);
    return;
  }
  ThreadPool::global().run(static_cast<int>(tasks), [&](int task) { tail(args, task, tasks, product); });
}

// ---- the tail's IR (emitTail) ----

namespace {

// A library = 2 kernel's part function: for this task's share of the product's rows, the
// epilogue's steps from postOpSteps() on (each rounded to the dtype, as the op-by-op reference
// does), then the gate program's outputs, or the value stored back over the product (the output).
class TailEmitter {
 public:
  static constexpr unsigned kLanes = matmul::kLanes;

  TailEmitter(const KernelSpec& spec, llvm::Function* part)
      : spec_(spec), part_(part), b_(part->getContext()), dtype_(spec.inputs[0].dtype), first_(postOpSteps(spec)) {}

  void emit() {
    b_.SetInsertPoint(&part_->getEntryBlock());
    ir::ArgsView args(b_, part_->getArg(0));
    llvm::Value* task = part_->getArg(1);
    llvm::Value* tasks = part_->getArg(2);
    product_ = part_->getArg(3);
    const int sa = matmul::slotA(spec_), sb = matmul::slotB(spec_);
    const matmul::MatmulDims dims = matmul::staticDims(spec_);
    llvm::Value* m = dims.m >= 0 ? i64(dims.m) : args.dim(sa, 2);
    n_ = dims.n >= 0 ? i64(dims.n) : args.dim(sb, 3);
    llvm::Value* batch1 = args.dim(sa, 1);
    llvm::Value* rows = b_.CreateMul(b_.CreateMul(args.dim(sa, 0), batch1), m);
    llvm::Value* share = b_.CreateUDiv(b_.CreateAdd(rows, b_.CreateSub(tasks, i64(1))), tasks);
    llvm::Value* lo = smin(b_.CreateMul(task, share), rows);
    llvm::Value* hi = smin(b_.CreateAdd(lo, share), rows);
    for (std::size_t s = first_; s < spec_.epilogue.size(); ++s) {
      const int operand = spec_.epilogue[s].operand;
      if (operand < 0 || extras_.count(operand) != 0) continue;
      Extra extra;
      extra.data = args.data(operand);
      for (int d = 0; d < kAxes; ++d) extra.strides[d] = args.stride(operand, d);
      extra.along_n = matmul::extraAlongN(spec_, spec_.inputs[static_cast<std::size_t>(operand)]);
      extras_.emplace(operand, extra);
    }
    if (spec_.fused != nullptr) prepareGates(args);
    ir::emitLoop(
        b_, lo, hi, 1,
        [&](llvm::Value* row) {
          llvm::Value* batch = b_.CreateUDiv(row, m);
          llvm::Value* i = b_.CreateURem(row, m);
          llvm::Value* i0 = b_.CreateUDiv(batch, batch1);
          llvm::Value* i1 = b_.CreateURem(batch, batch1);
          for (auto& [operand, extra] : extras_) {
            extra.base =
                b_.CreateAdd(b_.CreateAdd(b_.CreateMul(i0, extra.strides[0]), b_.CreateMul(i1, extra.strides[1])),
                             b_.CreateMul(i, extra.strides[2]));
          }
          row_start_ = b_.CreateMul(row, n_);
          if (spec_.fused != nullptr) {
            emitGateRow(row);
          } else {
            emitRow();
          }
        },
        "tail_row", ir::LoopHints::asEmitted());
    b_.CreateRetVoid();
  }

 private:
  static constexpr int kAxes = matmul::kMaxBatchRank + 2;
  // An epilogue operand: data, strides over the output's canonical axes, this row's offset.
  struct Extra {
    llvm::Value* data = nullptr;
    llvm::Value* strides[kAxes] = {};
    llvm::Value* base = nullptr;
    matmul::AlongN along_n = matmul::AlongN::Contiguous;
  };
  llvm::Value* i64(std::int64_t v) { return b_.getInt64(static_cast<std::uint64_t>(v)); }
  llvm::Value* smin(llvm::Value* x, llvm::Value* y) { return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, x, y); }
  llvm::Value* productPtr(llvm::Value* col) {
    return ir::elementPtr(b_, dtype_, product_, b_.CreateAdd(row_start_, col));
  }

  // The remaining epilogue steps on `value` (<16 x float> or float) = product[row, col ..).
  llvm::Value* applySteps(llvm::Value* value, llvm::Value* col) {
    const bool vector = value->getType()->isVectorTy();
    for (std::size_t s = first_; s < spec_.epilogue.size(); ++s) {
      const EpilogueStep& step = spec_.epilogue[s];
      if (step.operand < 0) {
        value = ir::roundTo(b_, ir::unaryOp(b_, step.op, dtype_, value), dtype_);
        continue;
      }
      const Extra& extra = extras_.at(step.operand);
      auto at = [&](llvm::Value* offset) { return ir::elementPtr(b_, dtype_, extra.data, offset); };
      llvm::Value* other = nullptr;
      if (!vector) {
        llvm::Value* step_n = extra.along_n == matmul::AlongN::Broadcast    ? i64(0)
                              : extra.along_n == matmul::AlongN::Contiguous ? i64(1)
                                                                            : extra.strides[3];
        other = ir::loadCompute(b_, dtype_, at(b_.CreateAdd(extra.base, b_.CreateMul(col, step_n))));
      } else if (extra.along_n == matmul::AlongN::Broadcast) {
        other = b_.CreateVectorSplat(kLanes, ir::loadCompute(b_, dtype_, at(extra.base)));
      } else if (extra.along_n == matmul::AlongN::Contiguous) {
        other = ir::loadCompute(b_, dtype_, at(b_.CreateAdd(extra.base, col)), kLanes);
      } else {
        // Stride 1: the lanes (none past the operand's row is touched); stride 0: one value.
        llvm::Value* contiguous = b_.CreateICmpEQ(extra.strides[3], i64(1));
        llvm::Value* lanes = ir::maskedLoadCompute(b_, dtype_, at(b_.CreateAdd(extra.base, col)),
                                                   b_.CreateVectorSplat(kLanes, contiguous));
        llvm::Value* scalar = b_.CreateVectorSplat(kLanes, ir::loadCompute(b_, dtype_, at(extra.base)));
        other = b_.CreateSelect(contiguous, lanes, scalar);
      }
      value = step.swapped ? ir::binaryOp(b_, step.op, dtype_, other, value)
                           : ir::binaryOp(b_, step.op, dtype_, value, other);
      value = ir::roundTo(b_, value, dtype_);
    }
    return value;
  }

  // No program: the row in place, 16 lanes at a time, then the last N % 16 one by one.
  void emitRow() {
    llvm::Value* whole = b_.CreateAnd(n_, i64(-static_cast<std::int64_t>(kLanes)));
    ir::emitLoop(
        b_, i64(0), whole, kLanes,
        [&](llvm::Value* col) {
          llvm::Value* ptr = productPtr(col);
          ir::storeCompute(b_, dtype_, applySteps(ir::loadCompute(b_, dtype_, ptr, kLanes), col), ptr);
        },
        "tail_col", ir::LoopHints::asEmitted());
    ir::emitLoop(
        b_, whole, n_, 1,
        [&](llvm::Value* col) {
          llvm::Value* ptr = productPtr(col);
          ir::storeCompute(b_, dtype_, applySteps(ir::loadCompute(b_, dtype_, ptr), col), ptr);
        },
        "tail_rest", ir::LoopHints::asEmitted());
  }

  void prepareGates(ir::ArgsView& args) {
    gates_.emplace(args, spec_);
    const int out_slot = static_cast<int>(spec_.inputs.size());
    inner_rows_ = spec_.fused->rank == 3 ? args.dim(out_slot, 1) : nullptr;
    hidden_ = matmul::staticDims(spec_).n / matmul::gateCount(spec_);  // static (supportsGates)
  }

  // A gate program on product row `row`: column block g of the product is leaf -(g + 1), H
  // columns, 16 lanes at a time (H is a multiple of 16), with the tail's epilogue steps applied;
  // the other leaves and the outputs are read / written at the row's index over the iteration's
  // leading axes.
  void emitGateRow(llvm::Value* row) {
    std::vector<llvm::Value*> at = {row};
    if (inner_rows_ != nullptr) at = {b_.CreateUDiv(row, inner_rows_), b_.CreateURem(row, inner_rows_)};
    ir::emitLoop(
        b_, i64(0), i64(hidden_), kLanes,
        [&](llvm::Value* col) {
          ir::emitGateColumns(b_, spec_, *gates_, at, col, kLanes, [&](int block) {
            llvm::Value* product_col = b_.CreateAdd(col, i64(block * hidden_));
            return applySteps(ir::loadCompute(b_, dtype_, productPtr(product_col), kLanes), product_col);
          });
        },
        "tail_gate", ir::LoopHints::asEmitted());
  }

  const KernelSpec& spec_;
  llvm::Function* part_;
  ir::Builder b_;
  DType dtype_;        // the operands', the product's and the program's
  std::size_t first_;  // the first epilogue step the tail runs
  llvm::Value* product_ = nullptr;
  llvm::Value* n_ = nullptr;
  llvm::Value* row_start_ = nullptr;  // row * N: the row's first element in the product
  std::map<int, Extra> extras_;       // epilogue operands of the tail's steps, by input index
  std::optional<ir::GateViews> gates_;  // a gate program's leaves and outputs
  llvm::Value* inner_rows_ = nullptr;  // a rank-3 program: the iteration's axis 1
  std::int64_t hidden_ = 0;            // H
};

}  // namespace

Status emitTail(const KernelSpec& spec, llvm::Function* part) {
  if (!hasTail(spec.params) || part == nullptr || part->arg_size() != 4 || part->empty() ||
      !part->getEntryBlock().empty()) {
    return makeError(ErrorCode::Internal, "oneDNN tail: not a library = 2 or 4 kernel's empty part function");
  }
  SVM_RETURN_IF_ERROR(expressible(spec));
  TailEmitter(spec, part).emit();
  return Status::ok();
}

LibraryStats stats() {
  Cache& c = cache();
  const auto totals = c.primitives.totals();
  return {totals.primitives,    totals.create_ms, c.calls.load(),        c.run_failures.load(), c.tail_calls.load(),
          c.sgemm_calls.load(), c.b_packs.load(), c.packed_calls.load(), prepare_hits.load()};
}

PackedOperand packedB(const KernelSpec& spec, const KernelArgs& args) {
  if (spec.params.library == 0 || isSgemm(spec.params) || Tunables::get(Tunable::PackedWeightEntries) <= 0) return {};
  // A call the generated kernel runs has another runner.
  const auto runner = static_cast<std::uintptr_t>(args.scalars[matmul::kScalarRunner]);
  if (runner != reinterpret_cast<std::uintptr_t>(&runLibraryMatmul) &&
      runner != reinterpret_cast<std::uintptr_t>(&runLibraryTail))
    return {};
  auto* primitive = reinterpret_cast<Primitive*>(static_cast<std::uintptr_t>(args.scalars[matmul::kScalarLibrary]));
  // As PackedOperandCache::admits would (no twin made for a B it never packs).
  if (primitive == nullptr ||
      primitive->problem().k * primitive->problem().n < Tunables::get(Tunable::PackedWeightMinElements))
    return {};
  Primitive* twin = primitive->packedTwin();
  if (twin == nullptr) return {};
  return {1, twin->packedBytes()};
}

void usePackedB(KernelArgs& args, void* buffer, PackMode mode) {
  args.scalars[kScalarPacked] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(buffer) |
                                                          (mode == PackMode::PackOnly ? kPackOnlyTag : 0));
}

void failExecutionsForTesting(bool fail) {
  Primitive::fail_for_testing_.store(fail, std::memory_order_relaxed);
}

}  // namespace shapevm::jit::onednn
