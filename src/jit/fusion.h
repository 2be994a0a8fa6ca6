// SPDX-License-Identifier: Apache-2.0
// A fused elementwise program: the kernel IR of one region's elementwise dataflow after fusion.
// Every view (reshape, transpose, split, squeeze/unsqueeze, slice) and every broadcast has already
// been turned into the strides of a leaf operand by the region planner (region.h), so a program
// is just a DAG of elementwise ops over leaves that all have the iteration shape; intermediates
// live in registers, only `outputs` are stored. The `fused` kernel family compiles it to one pass
// over memory (a loop nest whose innermost loop the vectorizer widens).
#pragma once

#include <string>
#include <vector>

#include "jit/kernel_abi.h"

namespace shapevm::jit {

struct FusedProgram {
  struct Node {
    OpId op = OpId::Identity;
    int a = -1;  // operand refs: >= 0 a node of this program, < 0 leaf number -ref-1
    int b = -1;  // second operand of a binary op; unused (-1) for unary ops
  };
  DType dtype = DType::Float32;   // every leaf, node and output (float32/float16/bfloat16)
  int rank = 0;                   // the iteration shape's rank
  std::vector<Node> nodes;        // in dependency order
  std::vector<int> outputs;       // node refs stored, in output order
  std::vector<int> leaf_inner;    // per leaf: innermost stride class 0 (broadcast), 1 (dense) or -1 (any)

  static int leafRef(int leaf) { return -leaf - 1; }
  static int leafOf(int ref) { return -ref - 1; }
  int numLeaves() const { return static_cast<int>(leaf_inner.size()); }
  std::string describe() const;   // "add,sigmoid,mul -> 2 outputs over 9 leaves"
};

// True for the ops a FusedProgram node may hold (float in, float out, one or two operands).
bool isFusableElementwise(OpId op);

// The kernel family of fused programs (KernelSpec::fused set, spec.inputs = the leaves).
const KernelFamily* fusedFamily();

}  // namespace shapevm::jit
