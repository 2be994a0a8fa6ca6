// SPDX-License-Identifier: Apache-2.0
// The frontend's linear IR: bytecode-shaped instructions with symbolic labels, inline op-site
// and call-site operands and constants by value. Lowering writes it, the optimizations rewrite
// it, and emitModule() turns it into a Module through the bytecode builder (the one way modules
// are built). Invariant: temporaries are defined once; named variables keep one register.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bytecode/builder.h"
#include "bytecode/module.h"

namespace shapevm::frontend {

struct IrConst {
  ConstKind kind = ConstKind::None;
  std::int64_t i = 0;
  double f = 0.0;
  bool b = false;
  std::string text;
  std::vector<std::int64_t> ints;
};

struct IrInst {
  Opcode op = Opcode::Nop;
  std::int32_t a = 0, b = 0, c = 0;   // plain operands (registers, params, slots, immediates, loop ids)
  int label = -1;                      // >= 0: this entry is a label definition, not an instruction
  int target_true = -1;                // Jump target / BranchIf true target (label ids)
  int target_false = -1;               // BranchIf false target
  IrConst constant;                    // LoadConst value; Assert message (text)
  std::string op_name;                 // CallOp op; Call callee (module function name)
  std::vector<std::int32_t> inputs;    // CallOp/Call inputs, TuplePack items
  std::vector<std::int32_t> outputs;   // CallOp/Call results, TupleUnpack items
  NamedAttrs attrs;                    // CallOp attributes given explicitly
  std::vector<TensorDescriptor> in_tokens, out_tokens;  // CallOp tokens; Call: each argument's token
  std::vector<ValueKind> arg_kinds;  // Call: each argument's kind as lowering knew it (None = unknown)
  SourceLoc loc;

  bool isLabel() const { return label >= 0; }
};

struct IrParam {
  std::string name;
  ValueKind kind = ValueKind::Tensor;
  TensorDescriptor token = TensorDescriptor::anyTensor();
};

struct IrFunction {
  std::string name;
  std::vector<IrParam> params;
  std::vector<std::string> dim_names;  // per dynamic dim id
  int num_outputs = 0;
  int num_loops = 0;
  int num_registers = 0;
  int num_labels = 0;
  std::vector<IrInst> code;
  std::map<std::int32_t, std::string> reg_names;  // debug info: register -> source variable
  std::vector<std::string> inlined_functions;     // debug info: what SourceLoc::inlined names
};

// Registers an instruction writes / reads (labels and -1 "none" inputs excluded).
std::vector<std::int32_t> irDefs(const IrInst& inst);
std::vector<std::int32_t> irUses(const IrInst& inst);
// True when removing the instruction (its results unused) cannot change the program:
// not a parameter load, control flow, loop marker, assert, call, output store, identity op or a
// TupleUnpack (whose arity check can fail at run time).
bool irIsRemovable(const IrInst& inst);

// Optimizations over one function (each returns the number of rewrites).
int eliminateDeadCode(IrFunction& fn);
int mergeReshapes(IrFunction& fn);
// Renumbers registers densely in order of first appearance.
void compactRegisters(IrFunction& fn);
// Gives registers whose live ranges do not overlap the same number (a function of 200k
// statements then fits the bytecode's register limit). Runs after compactRegisters; returns
// false (nothing changed) when the control flow is not the nested loops lowering produces.
bool reuseDeadRegisters(IrFunction& fn);

// Rewrites every register the instruction names: `rename(reg, written)` returns the new number.
void renameIrRegisters(IrInst& inst, const std::function<std::int32_t(std::int32_t, bool)>& rename);

// Inlining (inline.cc): the Call instructions of `caller` whose callee `lookup` returns (an
// already lowered function, or nullptr: never inline it) and fits InlineLimits are replaced by
// the callee's code. The callee's parameter checks must be proven by the arguments' kinds and
// tokens at the call (else the call stays); its ops keep their source locations (the callee's
// lines), its dynamic dims become the caller's. Returns the number of calls inlined.
struct InlineLimits {
  int max_instructions = 64;  // the callee's instructions (labels not counted)
};
int inlineCalls(IrFunction& caller, const std::function<const IrFunction*(const std::string&)>& lookup,
                const InlineLimits& limits = {});

// Emits the functions through the builder (labels, sites, constants deduplicated by it).
Expected<Module> emitModule(const std::vector<IrFunction>& functions, const std::string& module_name,
                            const std::string& source_file);

}  // namespace shapevm::frontend
