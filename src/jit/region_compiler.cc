// SPDX-License-Identifier: Apache-2.0
// O2 region fusion, compiling a range (see region.h): build the plan (region_planner.cc), run the
// reference on the planning inputs (region_inputs.cc), merge gate epilogues, group row blocks,
// compile and tune each step's kernel, then validate the compiled region against the reference
// (region_executor.cc runs both). Invariant: a region is returned only after it agreed.
#include "jit/region.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "jit/compile_cancel.h"
#include "jit/compiled_kernel.h"
#include "jit/conv_family.h"
#include "jit/install_record.h"
#include "jit/region_executor.h"
#include "jit/region_inputs.h"
#include "jit/region_plan.h"
#include "jit/shape_infer.h"
#include "jit/validate.h"
#include "ops/kernel_util.h"
#include "support/cpu_cores.h"
#include "support/logging.h"
#include "support/thread_pool.h"
#include "support/trace.h"
#include "support/tunables.h"

namespace shapevm::jit {

namespace {

// The shape token the bytecode gives value v: its producing op's output token, or for a region
// input the input token of an op reading it; nullptr when none (statistics, untyped sites).
const TensorDescriptor* tokenOf(const Function& function, const RegionPlan& p, int v) {
  const RValue& value = p.values[static_cast<std::size_t>(v)];
  auto token = [](const std::vector<TensorDescriptor>& tokens, std::size_t k) -> const TensorDescriptor* {
    return k < tokens.size() && tokens[k].is_tensor && !tokens[k].any_rank ? &tokens[k] : nullptr;
  };
  if (value.op >= 0) {
    const OpSite& site = function.op_sites[static_cast<std::size_t>(p.ops[static_cast<std::size_t>(value.op)].site)];
    return token(site.output_tokens, static_cast<std::size_t>(value.out));
  }
  for (const ROp& op : p.ops) {
    for (std::size_t k = 0; k < op.in.size(); ++k) {
      if (op.in[k] == v) return token(function.op_sites[static_cast<std::size_t>(op.site)].input_tokens, k);
    }
  }
  return nullptr;
}

// An opaque step's spec with every tensor dim its shape token does not hold static open (no range):
// a dim static in the token keeps the spec's size when they agree; without a token, every dim opens.
KernelSpec openToRegionTokens(const Function& function, const RegionPlan& p, const ROp& op, KernelSpec spec) {
  for (std::size_t k = 0; k < spec.inputs.size() && k < op.in.size(); ++k) {
    OperandSpec& operand = spec.inputs[k];
    if (!operand.is_tensor || op.in[k] < 0) continue;
    const TensorDescriptor* token = tokenOf(function, p, op.in[k]);
    const bool ranked = token != nullptr && token->rank() == operand.rank;
    for (int d = 0; d < operand.rank; ++d) {
      DimSpec& dim = operand.dims[d];
      const bool baked = ranked && token->dims[static_cast<std::size_t>(d)].is_static && dim.isStatic() &&
                         token->dims[static_cast<std::size_t>(d)].size == dim.size;
      if (!baked) dim = DimSpec{};
    }
  }
  return spec;
}

// Static dims and divisors of a fused program's iteration shape, from the shape token of the value
// that has it (checked again by the family on every call). Axis 0 stays dynamic: kernel threads
// split it.
void bakeStaticDims(FusedProgram& program, const TensorDescriptor* token, const Shape& planned) {
  program.static_dims.assign(static_cast<std::size_t>(program.rank), -1);
  program.divisors.assign(static_cast<std::size_t>(program.rank), 1);
  if (token == nullptr || token->rank() != program.rank || planned.rank() != program.rank) return;
  for (int d = 1; d < program.rank; ++d) {
    const DimToken& dim = token->dims[static_cast<std::size_t>(d)];
    if (dim.is_static && dim.size == planned[d]) {
      program.static_dims[static_cast<std::size_t>(d)] = dim.size;
    } else if (!dim.is_static && dim.divisor > 1 && planned[d] % dim.divisor == 0) {
      program.divisors[static_cast<std::size_t>(d)] = dim.divisor;
    }
  }
}

// Groups the steps into blocks (StepBlock): a fused or reduction step starts one; a later one that
// reads a member's output joins it (the steps between that read none run first, hoisted); an
// opaque step, or a matmul reading a member's output, ends it. Whether a block really runs in row
// blocks is decided per execution, on the actual layouts.
void planBlocks(RegionPlan& p) {
  const auto rowStep = [](const Step& s) { return s.kind == Step::Kind::Fused || s.kind == Step::Kind::Reduce; };
  const int n = static_cast<int>(p.steps.size());
  int k = 0;
  while (k < n) {
    StepBlock block;
    block.members.push_back(k);
    if (rowStep(p.steps[static_cast<std::size_t>(k)])) {
      std::set<int> made(p.steps[static_cast<std::size_t>(k)].outputs.begin(),
                         p.steps[static_cast<std::size_t>(k)].outputs.end());
      std::vector<int> independent;
      for (int j = k + 1; j < n; ++j) {
        const Step& step = p.steps[static_cast<std::size_t>(j)];
        if (step.kind == Step::Kind::Opaque) break;
        const bool reads = std::any_of(step.leaves.begin(), step.leaves.end(),
                                       [&](const Leaf& leaf) { return made.count(leaf.base) != 0; });
        if (!reads) {
          independent.push_back(j);
          continue;
        }
        if (!rowStep(step)) break;
        block.members.push_back(j);
        made.insert(step.outputs.begin(), step.outputs.end());
        block.hoisted.insert(block.hoisted.end(), independent.begin(), independent.end());
        independent.clear();
      }
    }
    k = block.members.back() + 1;
    p.blocks.push_back(std::move(block));
  }
}

// A Fused/Reduce/MatMul step's kernel inputs on the reference run's values (see RegionExecutor::stepInputs).
Expected<std::vector<Value>> stepLeaves(const RegionPlan& p, const Step& step, RegionExecutor& reference) {
  std::vector<Value> leaves;
  Shape iteration;
  if (step.kind != Step::Kind::MatMul || step.program) {
    const int first = step.kind == Step::Kind::Reduce ? step.source : step.outputs[0];
    iteration = p.values[static_cast<std::size_t>(first)].shape;
  }
  for (const Leaf& leaf : step.leaves) {
    if (readsView(step, leaves.size())) {
      SVM_ASSIGN_OR_RETURN(Value value, reference.leaf(leaf, iteration));
      leaves.push_back(std::move(value));
    } else {
      leaves.push_back(reference.realValue(leaf.base));
    }
  }
  return leaves;
}

// A MatMul step's spec: the site's inferred matmul spec, the epilogue's operands after A and B,
// and with a gate epilogue the program's leaf views after them (their stride along H baked in).
Expected<KernelSpec> matmulStepSpec(const RegionPlan& p, const Step& step, const std::vector<Value>& leaves,
                                    std::span<const std::vector<ProfileRecord>> records, int compiles) {
  const ROp& mm = p.ops[static_cast<std::size_t>(step.op)];
  const std::size_t site_index = static_cast<std::size_t>(&mm - p.ops.data());
  SVM_ASSIGN_OR_RETURN(ShapeInference inferred, inferSpec(mm.op, *mm.attrs, records[site_index], compiles));
  KernelSpec spec = inferred.spec;
  openConvExtents(spec);                                        // a conv step: any batch and image size
  for (std::size_t e = mm.in.size(); e < leaves.size(); ++e) {  // a matmul's or a conv's own inputs first
    const Tensor& t = leaves[e].tensor();
    OperandSpec operand;
    operand.dtype = t.dtype();
    operand.rank = t.rank();
    operand.contiguous = step.program && e >= step.matmul_leaves ? false : t.isContiguous();
    // A dense epilogue operand as long as a static N (a bias row, a residual) keeps N static:
    // the tiles load its lanes as vectors instead of choosing, per lane vector, between a vector
    // and a broadcast at run time (a third of the epilogue kernel's IR). The step's guard checks
    // it; a call with another length declines to the op-by-op run.
    if (mm.op == OpId::MatMul && operand.contiguous && operand.rank >= 1 && spec.inputs[1].rank >= 2) {
      const DimSpec& n = spec.inputs[1].dims[spec.inputs[1].rank - 1];
      DimSpec& last = operand.dims[operand.rank - 1];
      if (n.isStatic() && n.size > 1 && t.dim(t.rank() - 1) == n.size) {
        static_cast<DimRange&>(last) = DimRange::exactly(n.size);
        last.size = n.size;
      }
    }
    spec.inputs.push_back(operand);
  }
  spec.epilogue = step.epilogue;
  if (step.program) {
    FusedProgram& program = *step.program;
    for (std::size_t l = 0; l < step.fused_leaf_source.size(); ++l) {
      const int source = step.fused_leaf_source[l];
      if (source < 0) {
        program.leaf_inner[l] = 1;
        continue;
      }
      const Tensor& t = leaves[static_cast<std::size_t>(source)].tensor();
      const std::int64_t inner = t.rank() == 0 || t.dim(t.rank() - 1) == 1 ? 1 : t.stride(t.rank() - 1);
      program.leaf_inner[l] = inner == 0 || inner == 1 ? static_cast<int>(inner) : -1;
    }
    spec.fused = step.program;
    spec.fused_leaf_source = step.fused_leaf_source;
  }
  return spec;
}

// True when value w is value v or a view of it (through view ops only).
bool viewOf(const RegionPlan& p, int w, int v) {
  while (w != v) {
    const RValue& value = p.values[static_cast<std::size_t>(w)];
    if (value.op < 0) return false;
    const ROp& op = p.ops[static_cast<std::size_t>(value.op)];
    if (op.cls != OpClass::View || op.in.empty() || op.in[0] < 0) return false;
    w = op.in[0];
  }
  return true;
}

// Gate epilogues: a matmul whose product only one later fused step reads, through views that
// reshape its leading axes and split its columns into G equal blocks (the LSTM gates after
// x @ W.T + b), becomes one step: the program runs in the matmul's tiles on the accumulators and
// the product is never stored. The views' layout is checked structurally (reshape and split ops
// only, one split) and on the planning run (block g at column g * H, rows flattened row-major);
// the merged kernel must be one the matmul family supports, else the steps stay apart.
Status mergeGateEpilogues(RegionPlan& p, const Function& function, RegionExecutor& reference,
                          std::span<const std::vector<ProfileRecord>> records, int compiles) {
  if (Tunables::get(Tunable::RegionGateEpilogue) == 0) return Status::ok();
  for (std::size_t m = 0; m < p.steps.size(); ++m) {
    const Step& mm = p.steps[m];
    if (mm.kind != Step::Kind::MatMul || mm.program || mm.outputs.size() != 1 ||
        p.ops[static_cast<std::size_t>(mm.op)].op != OpId::MatMul) {
      continue;  // a conv step (OpClass::MatMul too) takes no gate epilogue
    }
    const int v = mm.outputs[0];
    bool elsewhere = false;
    for (const auto& [reg, w] : p.writeback) elsewhere = elsewhere || viewOf(p, w, v);
    int reader = -1;
    for (std::size_t k = 0; k < p.steps.size() && !elsewhere; ++k) {
      if (k == m) continue;
      const Step& step = p.steps[k];
      bool reads = step.source == v || step.center == v;
      if (step.kind == Step::Kind::Opaque) {
        for (int in : p.ops[static_cast<std::size_t>(step.op)].in) reads = reads || (in >= 0 && viewOf(p, in, v));
      }
      for (const Leaf& leaf : step.leaves) reads = reads || leaf.base == v;
      if (!reads) continue;
      if (reader >= 0 || step.kind != Step::Kind::Fused) elsewhere = true;
      reader = static_cast<int>(k);
    }
    if (elsewhere || reader < static_cast<int>(m)) continue;
    const Step& fused = p.steps[static_cast<std::size_t>(reader)];
    const FusedProgram& program = *fused.program;
    if (program.reduce != FusedProgram::Reduce::None || !program.in_place.empty() || program.rank < 2 ||
        program.rank > 3) {
      continue;
    }
    const Shape iteration = p.values[static_cast<std::size_t>(fused.outputs[0])].shape;
    const Tensor& product = reference.realValue(v).tensor();
    if (iteration.rank() != program.rank || product.rank() != 2 || !product.isContiguous()) continue;
    const std::int64_t hidden = iteration[iteration.rank() - 1];
    Step merged;
    merged.kind = Step::Kind::MatMul;
    merged.op = mm.op;
    merged.leaves = mm.leaves;
    merged.epilogue = mm.epilogue;
    merged.absorbed = mm.absorbed;
    merged.matmul_leaves = mm.leaves.size();
    merged.outputs = fused.outputs;
    bool fits = hidden > 0;
    int gates = 0;
    for (const Leaf& leaf : fused.leaves) {
      if (leaf.base != v) {
        merged.fused_leaf_source.push_back(static_cast<int>(merged.leaves.size()));
        merged.leaves.push_back(leaf);
        continue;
      }
      // Every execution's views, not only the planning run's, must map (rows..., u) of block g to
      // product[row, g * H + u]: so the chain may only reshape with a static last dim N (its
      // leading dims regroup the rows, row-major) and split the last axis once into blocks of a
      // static H, as the shape tokens say; broadcasts only to the shape a value already has.
      const std::int64_t n = product.dim(1);
      int block = -1;
      Shape shape = product.shape();
      auto lastStatic = [](const TensorDescriptor* t) {
        return t != nullptr && t->rank() > 0 && t->dims.back().is_static ? t->dims.back().size : -1;
      };
      for (const ChainItem& item : leaf.chain) {
        if (item.expand) {
          fits = fits && p.values[static_cast<std::size_t>(item.value)].shape == shape;
          continue;
        }
        const ROp& op = p.ops[static_cast<std::size_t>(item.op)];
        const int out = op.out[static_cast<std::size_t>(item.out)];
        const TensorDescriptor* from = tokenOf(function, p, op.in[0]);
        const TensorDescriptor* to = tokenOf(function, p, out);
        if (op.op == OpId::Split && block < 0 && from != nullptr) {
          const std::int64_t axis = (*op.attrs)[0].i;
          fits = fits && (axis == -1 || axis == from->rank() - 1) && lastStatic(from) == n && lastStatic(to) == hidden;
          block = item.out;
        } else {
          fits = fits && op.op == OpId::Reshape && lastStatic(from) == n && lastStatic(to) == n;
        }
        shape = p.values[static_cast<std::size_t>(out)].shape;
      }
      fits = fits && block >= 0;
      if (!fits) break;
      auto view = reference.leaf(leaf, iteration);
      if (!view) {
        fits = false;
        break;
      }
      const Tensor& t = view->tensor();
      const bool rank2 = iteration.rank() == 2;
      fits = t.storage() == product.storage() && t.shape() == iteration &&
             t.offset() == product.offset() + block * hidden && t.stride(iteration.rank() - 1) == 1 &&
             t.stride(iteration.rank() - 2) == n && (rank2 || t.stride(0) == iteration[1] * n);
      if (!fits) break;
      merged.fused_leaf_source.push_back(-block - 1);
      gates = std::max(gates, block + 1);
    }
    if (!fits || merged.leaves.size() == merged.matmul_leaves || gates < 2 || gates * hidden != product.dim(1))
      continue;
    merged.program = std::make_shared<FusedProgram>(program);
    SVM_ASSIGN_OR_RETURN(std::vector<Value> leaves, stepLeaves(p, merged, reference));
    SVM_ASSIGN_OR_RETURN(KernelSpec spec, matmulStepSpec(p, merged, leaves, records, compiles));
    if (!familyFor(OpId::MatMul)->supports(spec).isOk()) continue;
    // The merged step takes the fused step's place (its other inputs are real by then).
    p.steps[static_cast<std::size_t>(reader)] = std::move(merged);
    p.steps.erase(p.steps.begin() + static_cast<std::ptrdiff_t>(m));
    std::fill(p.producer.begin(), p.producer.end(), -1);
    for (std::size_t k = 0; k < p.steps.size(); ++k) {
      for (int out : p.steps[k].outputs) p.producer[static_cast<std::size_t>(out)] = static_cast<int>(k);
    }
    --m;
  }
  return Status::ok();
}

}  // namespace

std::optional<KernelParams> untunedLibraryParams(KernelBackend& engine, const KernelFamily& family,
                                                 const KernelSpec& spec) {
  // float32 only: oneDNN creates a float32 matmul on any x86-64 CPU, while a 16-bit one may fail
  // only once a call's shapes are known (the region's validation, which has no fallback).
  if (spec.op != OpId::MatMul || !(spec.params == KernelParams{}) || spec.inputs.size() < 2 ||
      spec.inputs[0].dtype != DType::Float32 || spec.inputs[1].dtype != DType::Float32)
    return std::nullopt;
  for (const KernelParams& params : family.searchSpace(engine.targetSpec(spec))) {
    if (params.library != 0) return params;
  }
  return std::nullopt;
}

namespace {

KernelParams tuneKernel(Tuner* tuner, KernelBackend& engine, const KernelFamily& family, const KernelSpec& spec,
                        std::span<const Value* const> examples, std::vector<TuneOutcome>* outcomes) {
  if (tuner == nullptr || family.searchSpace(engine.targetSpec(spec)).empty()) return KernelParams{};
  auto outcome = tuner->tune(engine, family, spec, examples);
  if (!outcome) return KernelParams{};  // a tuner error means default parameters
  if (outcomes != nullptr) outcomes->push_back(*outcome);
  return outcome->params;
}

// One step's kernel to compile: an optional one (an unfusable op's own kernel) may fail; a library
// kernel that does not compile is replaced by the generated one (`generated`, params {}).
struct KernelJob {
  std::size_t step = 0;
  const KernelFamily* family = nullptr;
  KernelSpec spec;
  bool optional = false;
  std::optional<KernelSpec> generated;
  bool open = false;            // an opaque step's open kernel (Step::open_kernel)
  std::vector<Shape> observed;  // its profiled input shapes, where its own validation starts
};

// Compiles `jobs` (compileKernel each), results in job order. The calling compile thread takes
// jobs in turn with up to region_compile_helpers helper threads, one per spare core: a core that
// neither a busy compile thread (this one included) nor a thread running a program holds
// (spareCores()), so a helper never takes a core from the interpreter; a helper that finds the
// cores overcommitted (a program started meanwhile) takes no further job. Helpers inherit this
// thread's lowered priority and SCHED_BATCH policy, count as busy compile threads
// (kernel_threads=auto leaves them their cores) and stop on this thread's cancel flag. LLVM
// compiles in parallel (JitEngine); links take turns. `helper_cpu_ms` gets the helpers' CPU time.
std::vector<Expected<std::unique_ptr<CompiledKernel>>> compileKernels(KernelBackend& engine,
                                                                      const std::vector<KernelJob>& jobs,
                                                                      double& helper_cpu_ms) {
  std::vector<Expected<std::unique_ptr<CompiledKernel>>> results;
  results.reserve(jobs.size());
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    results.emplace_back(makeError(ErrorCode::Internal, "kernel of step {} was not compiled", jobs[j].step));
  }
  std::atomic<std::size_t> next{0};
  auto work = [&](bool helper) {
    // A helper counts itself among the busy compile threads: below zero, it took a core from someone.
    const auto claim = [&] { return helper && spareCores() < 0 ? jobs.size() : next.fetch_add(1); };
    for (std::size_t j = claim(); j < jobs.size(); j = claim()) {
      const double start = threadCpuMs();
      results[j] = compileKernel(engine, *jobs[j].family, jobs[j].spec);
      if (!results[j] && jobs[j].generated) {
        logAt(LogLevel::Info, "JIT", "Region step {}: the library kernel for {} did not compile ({}); generated code",
              jobs[j].step, jobs[j].spec.signature(), results[j].status().message());
        results[j] = compileKernel(engine, *jobs[j].family, *jobs[j].generated);
      }
      logAt(LogLevel::Debug, "JIT", "Region step {}: {} kernel {} in {:.1f}ms CPU{}", jobs[j].step,
            jobs[j].family->name(), jobs[j].spec.signature(), threadCpuMs() - start,
            results[j] && (*results[j])->from_cache ? " (from the kernel cache)" : "");
    }
  };
  // The calling thread compiles too, marked busy or not (a warm start runs on the program's thread).
  const std::int64_t free_cores = spareCores() - (busyCompileThreads() == 0 ? 1 : 0);
  const std::int64_t wanted =
      std::min({free_cores, Tunables::get(Tunable::RegionCompileHelpers), static_cast<std::int64_t>(jobs.size()) - 1});
  const auto helpers = static_cast<std::size_t>(std::max<std::int64_t>(0, wanted));
  std::vector<std::thread> threads;
  std::vector<double> cpu_ms(helpers, 0.0);
  const std::atomic<bool>* cancel = detail::compile_cancel_flag;
  const bool lowered = threadPriorityLowered();
  for (std::size_t h = 0; h < helpers; ++h) {
    threads.emplace_back([&work, &cpu = cpu_ms[h], cancel, lowered] {
      if (lowered) (void)lowerThreadPriority(0);  // already lowered (inherited): marks it so (allocator)
      const double start = threadCpuMs();
      const CompileCancelScope scope(cancel);
      const BusyCompileThread busy;
      work(true);
      cpu = threadCpuMs() - start;
    });
  }
  work(false);
  for (std::thread& thread : threads) thread.join();
  for (double ms : cpu_ms) helper_cpu_ms += ms;
  return results;
}

// Why a plan on the smallest observed shapes was given up for one on the newest.
enum class Replan { No, TunerWouldTime, ReferenceFailed, GuardsExclude };

// compileRegion on the shapes `shapes` picks. On PlanningShapes::Smallest it stops (*replan set)
// where the newest shapes are needed instead: a tuner that would time a candidate (it must time
// the shapes the program runs now), a reference run that fails on the smaller shapes, or a step
// kernel whose guard (from the records' ranges, which follow the newest shapes) does not admit
// them, so the validation run cannot run it.
Expected<std::unique_ptr<CompiledRegion>> compileRegionOn(KernelBackend& engine, const Module& module,
                                                          const Function& function, const FusionRange& range,
                                                          const Liveness& liveness,
                                                          std::span<const std::vector<ProfileRecord>> records,
                                                          int compiles, Tuner* tuner, std::vector<TuneOutcome>* tuning,
                                                          RegionCompileTimes* times, PlanningShapes shapes,
                                                          Replan* replan, const ReferenceRunStore* kept_run) {
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  Clock::time_point phase = Clock::now();
  double phase_cpu = threadCpuMs();
  const auto cpu_since = [&phase_cpu] {
    const double now = threadCpuMs();
    return now - std::exchange(phase_cpu, now);
  };
  RegionCompileTimes local;
  if (times == nullptr) times = &local;
  auto region = std::make_unique<CompiledRegion>();
  region->range = range;
  region->plan = std::make_unique<RegionPlan>();
  RegionPlan& p = *region->plan;
  buildRegionGraph(p, function, range, liveness);

  // The prelude, replayed at each entry.
  for (int pc : range.prelude) {
    const Instruction& in = function.code[static_cast<std::size_t>(pc)];
    PreludeOp op;
    op.op = in.op;
    op.dst = in.a;
    if (in.op == Opcode::LoadConst) {
      if (in.b < 0 || static_cast<std::size_t>(in.b) >= module.constants.size())
        return makeError(ErrorCode::Internal, "bad constant");
      op.constant = module.constants[static_cast<std::size_t>(in.b)].value;
    } else if (in.op == Opcode::TuplePack) {
      for (std::int32_t i = 0; i < in.c; ++i)
        op.items.push_back(function.operand_pool[static_cast<std::size_t>(in.b + i)]);
    } else if (in.op == Opcode::DimOf) {
      op.items = {in.b};
      op.axis = in.c;
    } else {
      op.items = scalarBinaryOp(in.op) ? std::vector<int>{in.b, in.c} : std::vector<int>{in.b};
    }
    p.prelude.push_back(std::move(op));
  }
  SVM_ASSIGN_OR_RETURN(std::vector<Value> inputs, planningInputs(p, range, records, compiles, shapes));
  RegionExecutor reference(p, false);
  for (std::size_t i = 0; i < p.externals.size(); ++i) reference.setReal(p.externals[i], inputs[i]);
  // An earlier process's run on these very inputs, when kept (install_record.h), replaces it.
  const std::uint64_t inputs_key = kept_run != nullptr ? ReferenceRunStore::inputsKey(p, inputs) : 0;
  std::optional<std::vector<std::vector<Value>>> known;
  if (kept_run != nullptr) known = kept_run->load(inputs_key, p);
  if (times != nullptr) times->reference_kept = known.has_value();
  // A range whose ops fail on random inputs of its shapes (integer division by zero, an index out
  // of range ...) cannot be planned or validated: not fusable, not a codegen failure.
  if (Status run = known ? referenceRun(p, reference, *known) : referenceRun(p, reference); !run.isOk()) {
    if (shapes == PlanningShapes::Smallest) *replan = Replan::ReferenceFailed;
    return makeError(ErrorCode::Unsupported, "the reference run on random inputs of the observed shapes failed: {}",
                     run.message());
  }
  for (std::size_t v = 0; v < p.values.size(); ++v) {
    const Value& observed = reference.realValue(static_cast<int>(v));
    RValue& value = p.values[v];
    value.tensor = observed.isTensor();
    if (value.tensor) {
      const Tensor& t = observed.tensor();
      value.dtype = t.dtype();
      value.shape = t.shape();
      value.inner_stride = t.rank() == 0 || t.dim(t.rank() - 1) == 1 ? 1 : t.stride(t.rank() - 1);
    }
  }

  SVM_RETURN_IF_ERROR(planRegionSteps(p, function, range, liveness));
  reference.grow();
  SVM_RETURN_IF_ERROR(mergeGateEpilogues(p, function, reference, records, compiles));
  bool worthwhile = false;
  for (const Step& step : p.steps) {
    worthwhile = worthwhile || (step.kind == Step::Kind::MatMul && (!step.epilogue.empty() || step.program)) ||
                 (step.kind == Step::Kind::Fused && step.program->nodes.size() >= 2) ||
                 (step.kind == Step::Kind::Reduce && !step.program->nodes.empty());
  }
  if (!worthwhile) return makeError(ErrorCode::Unsupported, "nothing to fuse in this range");

  times->plan_ms = since(phase);
  times->plan_cpu_ms += cpu_since();
  trace::completeSince("compile", "shape inference (region plan)", phase);
  phase = Clock::now();
  double tuned_ms = 0, tuned_cpu_ms = 0;
  planBlocks(p);
  // Kernels, step by step, on the reference run's values (which also give the leaves' layouts):
  // each step's spec and tuned parameters first (tuning times alone), then every kernel compiled,
  // in parallel on the cores free now (compileKernels).
  std::vector<KernelJob> jobs;
  std::vector<std::pair<std::size_t, std::vector<Shape>>> open_observed;  // steps with an open kernel (validated below)
  for (std::size_t k = 0; k < p.steps.size(); ++k) {
    Step& step = p.steps[k];
    if (step.kind == Step::Kind::Opaque) {
      // An unfusable op with a kernel family (reductions, softmax, where, cast ...) gets its own
      // kernel as at O1; without one (or when it cannot be compiled) it runs the reference kernel.
      const ROp& op = p.ops[static_cast<std::size_t>(step.op)];
      const KernelFamily* family = familyFor(op.op);
      if (family == nullptr) continue;
      auto inferred = inferSpec(op.op, *op.attrs, records[static_cast<std::size_t>(step.op)], compiles);
      if (!inferred) continue;
      openPoolExtents(inferred->spec);  // a pool: one kernel for every image size
      // The profile records hold the sizes seen before this compile (one, for a region compiled
      // early); the region serves every size its other steps admit. Beside the kernel for the
      // profiled sizes, a second one takes each dim the op's shape tokens leave dynamic open (the
      // family reads it per call, as O1's symbolic kernels do), keeping the token-static ones
      // baked: it runs the sizes the first one's guard misses (none at the profiled sizes, whose
      // kernel stays as it was).
      KernelSpec opened = openToRegionTokens(function, p, op, inferred->spec);
      const bool wider = opened.signature() != inferred->spec.signature() && family->supports(opened).isOk();
      if (family->supports(inferred->spec).isOk()) {
        jobs.push_back({k, family, inferred->spec, /*optional=*/true});
      }
      if (wider) {
        KernelJob open{k, family, std::move(opened), /*optional=*/true};
        open.open = true;
        open.observed = inferred->observed;
        jobs.push_back(std::move(open));
      }
      continue;
    }
    SVM_ASSIGN_OR_RETURN(std::vector<Value> leaves, stepLeaves(p, step, reference));
    std::vector<const Value*> pointers;
    for (const Value& v : leaves) pointers.push_back(&v);
    KernelSpec spec;
    const KernelFamily* family = nullptr;
    if (step.kind != Step::Kind::MatMul) {
      FusedProgram& program = *step.program;
      for (std::size_t l = 0; l < leaves.size(); ++l) {
        const Tensor& t = leaves[l].tensor();
        const std::int64_t inner = t.rank() == 0 ? 1 : t.stride(t.rank() - 1);
        program.leaf_inner[l] = inner == 0 || inner == 1 ? static_cast<int>(inner) : -1;
        OperandSpec operand;
        operand.dtype = t.dtype();
        operand.rank = t.rank();
        operand.contiguous = false;
        spec.inputs.push_back(operand);
      }
      const int shaped_by = step.kind == Step::Kind::Reduce ? step.source : step.outputs[0];
      bakeStaticDims(program, tokenOf(function, p, shaped_by), p.values[static_cast<std::size_t>(shaped_by)].shape);
      spec.op = OpId::Identity;
      spec.fused = step.program;
      family = fusedFamily();
    } else {
      SVM_ASSIGN_OR_RETURN(spec, matmulStepSpec(p, step, leaves, records, compiles));
      family = familyFor(p.ops[static_cast<std::size_t>(step.op)].op);  // a matmul's, or a conv's
      step.guard = guardFor(spec);
    }
    SVM_RETURN_IF_ERROR(family->supports(spec).withContext(fmt::format("step {} of the region", k)));
    if (shapes == PlanningShapes::Smallest && tuner != nullptr &&
        tuner->estimate(engine, *family, spec, 0).cost_ms > 0) {
      *replan = Replan::TunerWouldTime;
      return makeError(ErrorCode::Unsupported, "step {} is tuned on the newest observed shapes", k);
    }
    const Clock::time_point tune_start = Clock::now();
    const double tune_start_cpu = threadCpuMs();
    spec.params = tuneKernel(tuner, engine, *family, spec, pointers, tuning);
    tuned_ms += since(tune_start);
    tuned_cpu_ms += threadCpuMs() - tune_start_cpu;
    // Untuned, a matmul step is oneDNN's primitive where the library computes it (a stub kernel:
    // its compile is a few ms where the generated one takes 40-50; BENCHMARKS.md, "O1
    // transcendentals and matmuls under 30 ms").
    std::optional<KernelSpec> generated;
    if (tuner == nullptr && step.kind == Step::Kind::MatMul) {
      if (std::optional<KernelParams> library = untunedLibraryParams(engine, *family, spec)) {
        generated = spec;
        spec.params = *library;
      }
    }
    jobs.push_back({k, family, spec, /*optional=*/false, std::move(generated)});
    if (step.stat) {
      // A statistic is no register's value: the reference run gets it from the program's own
      // reference semantics, for the steps after it.
      std::vector<Value> stat(step.outputs.size());
      SVM_RETURN_IF_ERROR(family->reference(spec, pointers, stat));
      for (std::size_t o = 0; o < stat.size(); ++o) reference.setReal(step.outputs[o], std::move(stat[o]));
    }
  }

  double helper_cpu_ms = 0;
  std::vector<Expected<std::unique_ptr<CompiledKernel>>> kernels = compileKernels(engine, jobs, helper_cpu_ms);
  times->helper_cpu_ms += helper_cpu_ms;
  times->tuning_cpu_ms += tuned_cpu_ms;
  times->codegen_cpu_ms += cpu_since() - tuned_cpu_ms + helper_cpu_ms;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    Step& step = p.steps[jobs[j].step];
    if (!kernels[j]) {
      if (jobs[j].optional) continue;  // an unfusable op's own kernel: the reference kernel runs it
      return std::move(kernels[j]).status();
    }
    if (jobs[j].open) {
      step.open_kernel = std::move(*kernels[j]);
      step.open_kernel->corrupt_outputs = Tunables::get(Tunable::JitTestCorruptKernels) != 0;
      step.open_guard = guardFor(step.open_kernel->spec);
      open_observed.emplace_back(jobs[j].step, std::move(jobs[j].observed));
      continue;
    }
    step.kernel = std::move(*kernels[j]);
    // A kept kernel for wider ranges guards with its own spec.
    if (jobs[j].optional || step.kind == Step::Kind::MatMul) step.guard = guardFor(step.kernel->spec);
  }

  times->codegen_ms = since(phase) - tuned_ms;
  trace::completeSince("compile", "codegen + tuning", phase);
  phase = Clock::now();
  const double library_codegen_before_ms = engine.threadLibraryCodegenMs();
  // Validation: the compiled region on the same inputs, outputs NaN-poisoned, against the
  // reference run's values of every register the range writes back. On one thread (validate.h),
  // preparing the library matmuls' primitives for the program's calls at the profiled shapes too:
  // created once it passed (codegen, not validation).
  {
    ProgramCalls program_calls;
    program_calls.defer_creation = true;
    for (const Step& step : p.steps) {
      if (step.kind == Step::Kind::MatMul && step.op >= 0 && static_cast<std::size_t>(step.op) < records.size())
        program_calls.addMatmul(records[static_cast<std::size_t>(step.op)]);
    }
    const ProgramCallsScope program_calls_scope(program_calls);
    const KernelThreadsOnThisThread one(1);
    RegionExecutor eval(p, true);
    for (std::size_t i = 0; i < p.externals.size(); ++i) eval.setReal(p.externals[i], inputs[i]);
    if (Status run = eval.runAll(false); !run.isOk()) {
      if (shapes == PlanningShapes::Smallest && run.code() == ErrorCode::ShapeMismatch) *replan = Replan::GuardsExclude;
      return run.withContext("validation run");
    }
    std::vector<Value> expected, actual;
    for (const auto& [reg, v] : p.writeback) {
      if (!reference.realValue(v).isTensor()) continue;
      expected.push_back(reference.realValue(v));
      SVM_ASSIGN_OR_RETURN(const Value* got, eval.real(v));
      actual.push_back(*got);
    }
    const Comparison comparison = compareOutputs(expected, actual);
    if (!comparison.ok) {
      return makeError(ErrorCode::JitError, "fused region disagrees with the reference: {}", comparison.reason);
    }
    // An opaque step's open kernel runs the sizes its profiled-size kernel's guard misses, which the
    // region's run above need not reach: it is validated on its own as an O1 kernel is (shapes
    // across its ranges). One that fails is dropped (those sizes run the reference kernel, counted).
    for (auto& [k, observed] : open_observed) {
      Step& step = p.steps[k];
      if (!step.open_kernel) continue;
      const std::uint64_t seed = (static_cast<std::uint64_t>(range.start_pc) << 32) ^ k ^
                                 static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
      Status valid = validateKernel(*step.open_kernel, validationShapes(step.open_kernel->spec, observed), seed);
      if (!valid.isOk()) {
        logAt(LogLevel::Info, "JIT", "Region at PC=0x{:02X}: open kernel {} dropped: {}", range.start_pc,
              step.open_kernel->spec.signature(), valid.toString());
        (void)engine.free(step.open_kernel->handle);  // its code is of no use
        step.open_kernel.reset();
      }
    }
    program_calls.createDeferred();
  }
  if (kept_run != nullptr && !known) kept_run->keep(inputs_key, p, reference);
  // The step kernels' packings of the planning inputs (random weights) are of no use later.
  for (Step& step : p.steps) {
    if (step.kernel) step.kernel->packed.clear();
  }
  // Library primitives its steps created on the validation's shapes are codegen (see KernelBackend).
  const double library_codegen_ms = engine.threadLibraryCodegenMs() - library_codegen_before_ms;
  times->codegen_ms += library_codegen_ms;
  times->codegen_cpu_ms += library_codegen_ms;
  times->validate_ms = std::max(0.0, since(phase) - library_codegen_ms);
  times->validate_cpu_ms += std::max(0.0, cpu_since() - library_codegen_ms);
  trace::completeSince("compile", "validation", phase);
  return region;
}

}  // namespace

Expected<std::unique_ptr<CompiledRegion>> compileRegion(KernelBackend& engine, const Module& module,
                                                        const Function& function, const FusionRange& range,
                                                        const Liveness& liveness,
                                                        std::span<const std::vector<ProfileRecord>> records,
                                                        int compiles, Tuner* tuner, std::vector<TuneOutcome>* tuning,
                                                        RegionCompileTimes* times, const ReferenceRunStore* kept_run) {
  // Planned and validated on the smallest observed shapes when they differ from the newest: the
  // reference run and the validation run scale with them, and kernels, guards and tuning-database
  // keys come from the records' ranges, not from the planning shapes. Tuning that must time, or a
  // reference run the smaller shapes fail, plans again on the newest (the behaviour before).
  bool smaller = false;
  for (const auto& site_records : records) {
    smaller = smaller || planningRecord(site_records, PlanningShapes::Smallest) != newestRecord(site_records);
  }
  if (smaller && Tunables::get(Tunable::RegionPlanSmallest) != 0) {
    Replan replan = Replan::No;
    const std::size_t tuned_before = tuning != nullptr ? tuning->size() : 0;
    auto region = compileRegionOn(engine, module, function, range, liveness, records, compiles, tuner, tuning, times,
                                  PlanningShapes::Smallest, &replan, kept_run);
    if (region || replan == Replan::No) return region;
    if (tuning != nullptr) tuning->resize(tuned_before);
  }
  Replan unused = Replan::No;
  return compileRegionOn(engine, module, function, range, liveness, records, compiles, tuner, tuning, times,
                         PlanningShapes::Newest, &unused, kept_run);
}

}  // namespace shapevm::jit
