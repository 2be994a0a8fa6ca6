// SPDX-License-Identifier: Apache-2.0
// A fused elementwise program: the kernel IR of one region's elementwise dataflow after fusion.
// Every view (reshape, transpose, split, squeeze/unsqueeze, slice) and every broadcast has already
// been turned into the strides of a leaf operand by the region planner (region.h), so a program
// is just a DAG of elementwise ops over leaves that all have the iteration shape; intermediates
// live in registers, only `outputs` are stored. The `fused` kernel family compiles it to one pass
// over memory (a loop nest whose innermost loop the vectorizer widens).
//
// A program may also end in a reduction over its trailing `reduce_axes` iteration axes (sum,
// mean, max, min): its first output is then the reduced value of the DAG, accumulated in double
// (sums) or float32 (max/min, NaN propagating) per element of the kept axes — a reduction fused
// with its producers, which are never materialized. Further outputs of a reduction are stored
// per element on the way (a value a later step would otherwise compute again). The region
// planner decomposes softmax, log_softmax and layer_norm into such statistics (max, sum of exp,
// mean, variance; stored in float32) and elementwise nodes that read them, so their consumers
// fuse too. A program may also store a value back over one of its leaves (`in_place`): float32
// softmax keeps exp(x - max) from its sum step and only rescales it, as the O1 kernel does.
// Static iteration dims and known divisors (from the program's shape tokens) are baked in and
// checked by the family before each call.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "jit/kernel_abi.h"

namespace shapevm::jit {

struct FusedProgram {
  struct Node {
    OpId op = OpId::Identity;
    int a = -1;  // operand refs: >= 0 a node of this program, < 0 leaf number -ref-1
    int b = -1;  // second operand of a binary op; unused (-1) for unary ops
    bool rounded = true;  // rounded to `dtype` after the op, as the reference op is (false: an
                          // intermediate of a decomposed normalization, kept in float32)
    bool constant = false;  // a float32 constant `value` (no operands)
    double value = 0.0;
    // Whether the op takes one operand (a unary node's `b` is -1, which would be leaf 0).
    bool unary() const { return OpRegistry::global().schema(op).cls != shapevm::OpClass::Binary; }
  };
  enum class Reduce : std::uint8_t { None, Sum, Mean, Max, Min };

  DType dtype = DType::Float32;   // nodes and outputs (float32/float16/bfloat16)
  int rank = 0;                   // the iteration shape's rank
  std::vector<Node> nodes;        // in dependency order
  std::vector<int> outputs;       // refs stored, in output order
  // (leaf, ref): ref stored back over the leaf's own elements, each read before it is written at
  // the same place, so a program finishes a buffer an earlier step filled without a fresh one.
  // They take no output slot; the leaf must be dense (leaf_inner 1) and alias no other leaf
  // (the region runtime checks its views before each call). Not for reductions.
  std::vector<std::pair<int, int>> in_place;
  std::vector<int> leaf_inner;    // per leaf: innermost stride class 0 (broadcast), 1 (dense) or -1 (any)
  std::vector<DType> leaf_dtype;  // per leaf: its element type (dtype, or float32 for statistics)
  std::vector<std::int64_t> static_dims;  // per iteration axis: the extent baked in, -1 = dynamic
  std::vector<std::int64_t> divisors;     // per iteration axis: a known divisor of the extent (1 = none)
  // Reduction programs: outputs[0] reduced over the trailing `reduce_axes` axes (>= 1);
  // outputs[1..] stored per element of the iteration shape, in `dtype`.
  Reduce reduce = Reduce::None;
  int reduce_axes = 0;
  bool keepdims = true;
  DType out_dtype = DType::Float32;  // reductions: the stored type (dtype, or float32 for statistics)

  static int leafRef(int leaf) { return -leaf - 1; }
  static int leafOf(int ref) { return -ref - 1; }
  int numLeaves() const { return static_cast<int>(leaf_inner.size()); }
  DType leafDType(int leaf) const {
    return static_cast<std::size_t>(leaf) < leaf_dtype.size() ? leaf_dtype[static_cast<std::size_t>(leaf)] : dtype;
  }
  DType outputDType(std::size_t o = 0) const { return reduce == Reduce::None || o > 0 ? dtype : out_dtype; }
  // The shape output o stores for an iteration shape: a reduction's reduced shape for its first
  // output, the iteration shape itself otherwise.
  Shape outputShape(const Shape& iteration, std::size_t o = 0) const;
  std::string describe() const;   // "add,sigmoid,mul -> 2 outputs over 9 leaves"

};

// True for the ops a FusedProgram node may hold (float in, float out, one or two operands):
// those ops.def marks `fuse`.
bool isFusableElementwise(OpId op);

// The kernel family of fused programs (KernelSpec::fused set, spec.inputs = the leaves).
const KernelFamily* fusedFamily();

}  // namespace shapevm::jit
