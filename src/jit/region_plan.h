// SPDX-License-Identifier: Apache-2.0
// The plan of a fused range (internal to the region_*.cc files): SSA values and ops of
// the range, and the steps that compute them (matmuls with epilogues, fused kernels, reductions,
// opaque ops), grouped into row blocks. The planner (region_planner.cc) builds it; region_compiler.cc runs
// the reference on it, compiles its kernels, validates and executes it. Invariant: a value is
// materialized only by its producer step (RegionPlan::producer), every other use reads it through
// a leaf's index map.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "bytecode/module.h"
#include "jit/compiled_kernel.h"
#include "jit/fusion.h"
#include "jit/liveness.h"
#include "jit/region.h"

namespace shapevm::jit {

// Elementwise: a fused-kernel node. View: a leaf's index map. MatMul: a step with an epilogue.
// Reduce: sum/mean/max/min over trailing axes, a reduction step fused with its producers. Norm:
// softmax/log_softmax/layer_norm over trailing axes, decomposed into statistic reductions and
// elementwise nodes. Opaque: a step of its own.
enum class OpClass : std::uint8_t { Elementwise, View, MatMul, Reduce, Norm, Opaque };

inline bool scalarBinaryOp(Opcode op) {
  return op >= Opcode::Add && op <= Opcode::Or;
}
inline bool scalarUnaryOp(Opcode op) {
  return op >= Opcode::Neg && op <= Opcode::ToBool;
}

// Instructions a range replays at entry (shape arithmetic: a reshape's target shape).
inline bool preludeOp(Opcode op) {
  return op == Opcode::LoadConst || op == Opcode::TuplePack || op == Opcode::DimOf || scalarBinaryOp(op) ||
         scalarUnaryOp(op);
}

struct RValue {
  int reg = -1;  // External: the register read at the range's entry
  int op = -1;   // else: the producing op (index into RegionPlan::ops) and its output number
  int out = 0;
  DType dtype = DType::Float32;
  Shape shape;                    // as observed in the planning run (the reference on random inputs)
  std::int64_t inner_stride = 1;  // the observed innermost stride (1 when rank 0 or that dim is 1)
  bool tensor = true;
};

struct ROp {
  int site = 0;
  int pc = 0;
  OpId op = OpId::Identity;
  const std::vector<AttrValue>* attrs = nullptr;
  std::vector<int> in;   // value ids (-1 = omitted input)
  std::vector<int> out;  // value ids
  OpClass cls = OpClass::Opaque;
  int absorbed_by = -1;    // a matmul step whose epilogue computes this op
  int reduce_axes = 0;     // Reduce/Norm: the trailing axes it works over
  std::vector<int> stats;  // Norm: its statistics (max and sum of exp, or mean and variance)
  int kept = -1;           // Norm: exp(x - max) stored by softmax's sum step (Planner::keepsExp), -1 none
};

struct ChainItem {
  bool expand = false;  // true: broadcast to the shape of `value`; false: view op `op`, output `out`
  int op = -1;
  int out = 0;
  int value = -1;
  bool operator<(const ChainItem& o) const {
    return std::tie(expand, op, out, value) < std::tie(o.expand, o.op, o.out, o.value);
  }
  bool operator==(const ChainItem&) const = default;
};

struct Leaf {
  int base = -1;
  std::vector<ChainItem> chain;  // applied in order to the base value
};

struct ViewMemo;  // region_executor.cc

struct Step {
  enum class Kind : std::uint8_t { Fused, MatMul, Reduce, Opaque };
  Kind kind = Kind::Fused;
  int op = -1;               // MatMul/Opaque: the op
  std::vector<Leaf> leaves;  // Fused: the kernel's leaves; MatMul: A, B, epilogue operands
  // Values this step makes real: the kernel's outputs in order, then (Fused) those its program
  // stores in place over a leaf (FusedProgram::in_place, in order; the leaf's buffer becomes the
  // value), and (a statistic's Reduce) the per-element values it keeps after the statistic.
  std::vector<int> outputs;
  std::vector<EpilogueStep> epilogue;
  std::vector<int> absorbed;  // MatMul: the epilogue's ops
  std::unique_ptr<CompiledKernel> kernel;
  Guard guard;  // MatMul: the kernel's guard on A, B and the extras
  // Opaque: a second kernel of the op's family whose spec leaves the token-dynamic dims open, for
  // the sizes the region admits and `kernel` (the profiled sizes) does not; its guard.
  std::unique_ptr<CompiledKernel> open_kernel;
  Guard open_guard;
  std::shared_ptr<FusedProgram> program;
  // MatMul with a gate epilogue (`program` set; see KernelSpec::fused_leaf_source): its first
  // `matmul_leaves` leaves are A, B and the epilogue operands, the rest the program's leaf views.
  std::vector<int> fused_leaf_source;
  std::size_t matmul_leaves = 0;
  // Reduce: the reduction of `source` (or, with `center`, of transform(source - center)).
  int source = -1;
  int center = -1;
  OpId transform = OpId::Identity;  // Exp (softmax's sum) or Mul (squares: layer_norm's variance)
  FusedProgram::Reduce reduce = FusedProgram::Reduce::None;
  int reduce_axes = 0;
  bool keepdims = true;
  bool stat = false;  // its output is a statistic of a decomposed normalization (not a register value)
  mutable std::vector<std::vector<Value>> pool;  // per output: reusable buffers (two, alternating)
  mutable std::shared_ptr<ViewMemo> views;       // its leaves' view layouts (region_executor.cc)
};

// How many of a step's outputs its kernel stores into buffers of their own (the rest are stored
// in place over leaves).
inline std::size_t kernelOutputs(const Step& step) {
  return step.outputs.size() - (step.program ? step.program->in_place.size() : 0);
}

// True when the step's kernel reads leaf k as its view at the iteration shape (fused and reduction
// steps, a gate epilogue's program leaves), false when as the value itself (a matmul's operands).
inline bool readsView(const Step& step, std::size_t k) {
  return step.kind != Step::Kind::MatMul || (step.program && k >= step.matmul_leaves);
}

// A prelude instruction replayed at entry: LoadConst (`constant`), TuplePack of `items`, DimOf
// (items[0], axis) or a scalar op of items (the interpreter's scalar semantics).
struct PreludeOp {
  Opcode op = Opcode::Nop;
  int dst = 0;
  Value constant;
  std::vector<int> items;
  int axis = 0;
};

// Steps run together row block by row block (RegionRowBlockKb): `members` in order, each a fused
// kernel or reduction, each later one reading an earlier member's output; `hoisted` are steps
// between them that read no member's output and run first. A block of one member is a plain step.
// A matmul never joins one: measured on the reference cell, running its rows in blocks (its
// packed B streamed again for every block) cost more than the gate kernel gained from reading gx
// in cache (0.72 -> 0.83 ms at seq 10), since that kernel is bound by its sigmoid/tanh math.
struct StepBlock {
  std::vector<int> hoisted;
  std::vector<int> members;
};

struct RegionPlan {
  std::vector<PreludeOp> prelude;
  std::vector<RValue> values;
  std::vector<ROp> ops;
  std::vector<Step> steps;
  std::vector<StepBlock> blocks;               // every step once, in an order that respects their dataflow
  std::vector<int> producer;                   // per value: the step making it real, -1 none
  std::vector<std::pair<int, int>> writeback;  // (register, value) for registers live after the range
  std::vector<int> externals;                  // value ids read from registers at entry
  int fused_ops = 0;
};

// The planner, in two phases around the planning run: the SSA graph of the range (values, ops,
// externals and write-back; the externals' shapes are filled in by the reference run), then,
// once every value's shape is known, the op classes, the steps and the fused programs.
void buildRegionGraph(RegionPlan& plan, const Function& function, const FusionRange& range, const Liveness& liveness);
Status planRegionSteps(RegionPlan& plan, const Function& function, const FusionRange& range, const Liveness& liveness);

}  // namespace shapevm::jit
