// SPDX-License-Identifier: Apache-2.0
// ModuleBuilder / FunctionBuilder: the one way modules are constructed (assembler, frontend,
// tests). Invariants it keeps: op sites and call sites are created in PC order, one per
// CallOp/Call (the verifier's site-use rules); register lists are appended to the operand pool in
// PC order; num_registers/num_loops default to max id used + 1. Errors are sticky:
// the first failure is returned again by finish().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bytecode/module.h"

namespace shapevm {

class ModuleBuilder;

// A jump target that may be used before it is bound (patched at finish()).
struct Label {
  int id = -1;
};

using NamedAttrs = std::vector<std::pair<std::string, AttrValue>>;

class FunctionBuilder {
 public:
  FunctionBuilder(ModuleBuilder* module, int index, std::string name);

  int index() const { return index_; }
  const std::string& name() const { return function_.name; }
  int pc() const { return static_cast<int>(function_.code.size()); }

  // Declarations. addParam returns the parameter index; tokens matter for tensors only.
  int addParam(std::string name, ValueKind kind, TensorDescriptor token = TensorDescriptor::anyTensor());
  void setOutputs(int count) { function_.num_outputs = count; }
  void declareDim(int id, std::string name);
  // Explicit counts; without them finish() uses max id used + 1.
  void setRegisters(int count) { explicit_registers_ = count; }
  void setLoops(int count) { explicit_loops_ = count; }
  // Source location of the instructions emitted from now on.
  void setLoc(SourceLoc loc) { loc_ = loc; }

  // Emits one plain instruction; returns its PC. (CallOp/Call/list forms have their own emitters.)
  int emit(Opcode op, std::int32_t a = 0, std::int32_t b = 0, std::int32_t c = 0);

  // Labels: targets patched when bound (before or after use).
  Label newLabel(std::string name = "");
  Status bind(Label label);
  bool isBound(Label label) const;
  // Field 0/1/2 (a/b/c) of the instruction at `pc` jumps to `label`.
  void useLabel(Label label, int pc, int field);
  int emitJump(Label target);
  int emitBranchIf(std::int32_t cond, Label if_true, Label if_false);

  // Op sites: validates the op, input/output counts and attributes (resolveAttrs). Empty token
  // lists get defaults ([*] for tensor inputs and outputs, `_` for others and omitted inputs).
  Expected<int> addOpSite(std::string_view op, std::vector<std::int32_t> inputs, std::vector<std::int32_t> outputs,
                          const NamedAttrs& attrs = {}, std::vector<TensorDescriptor> input_tokens = {},
                          std::vector<TensorDescriptor> output_tokens = {});
  Expected<int> addOpSite(OpId op, std::vector<std::int32_t> inputs, std::vector<std::int32_t> outputs,
                          const NamedAttrs& attrs = {}, std::vector<TensorDescriptor> input_tokens = {},
                          std::vector<TensorDescriptor> output_tokens = {});
  // addOpSite + emit CallOp; returns the PC.
  Expected<int> emitCallOp(std::string_view op, std::vector<std::int32_t> inputs, std::vector<std::int32_t> outputs,
                           const NamedAttrs& attrs = {}, std::vector<TensorDescriptor> input_tokens = {},
                           std::vector<TensorDescriptor> output_tokens = {});

  // Call sites; the callee by index or by name (resolved at finish(), so forward calls work).
  int addCallSite(int callee, std::vector<std::int32_t> args, std::vector<std::int32_t> results);
  int emitCall(int callee, std::vector<std::int32_t> args, std::vector<std::int32_t> results);
  int emitCall(std::string callee, std::vector<std::int32_t> args, std::vector<std::int32_t> results);

  // Register lists (operand pool); returns the pool offset.
  int addRegisterList(std::span<const std::int32_t> registers);
  int emitTuplePack(std::int32_t dst, std::span<const std::int32_t> items);
  int emitTupleUnpack(std::int32_t src, std::span<const std::int32_t> items);

  // Read access to what has been built so far.
  const Function& function() const { return function_; }

 private:
  friend class ModuleBuilder;
  Expected<Function> finish(const ModuleBuilder& module);

  struct LabelInfo {
    std::string name;
    int pc = -1;
    std::vector<std::pair<int, int>> uses;  // (pc, field)
  };
  struct NamedCall {
    int site = 0;
    std::string callee;
  };

  [[maybe_unused]] ModuleBuilder* module_;  // set, never read (clang: -Wunused-private-field)
  int index_;
  Function function_;
  SourceLoc loc_;
  int explicit_registers_ = -1;
  int explicit_loops_ = -1;
  std::vector<LabelInfo> labels_;
  std::vector<NamedCall> named_calls_;
  Status error_;
};

class ModuleBuilder {
 public:
  explicit ModuleBuilder(std::string name = "");
  ModuleBuilder(const ModuleBuilder&) = delete;
  ModuleBuilder& operator=(const ModuleBuilder&) = delete;

  void setName(std::string name) { name_ = std::move(name); }
  void setSourceFile(std::string file) { source_file_ = std::move(file); }

  // Deduplicated constants: the same value returns the same index (floats compared by bits).
  int constNone();
  int constInt(std::int64_t value);
  int constFloat(double value);
  int constBool(bool value);
  int constString(std::string text);
  int constInts(std::vector<std::int64_t> values);
  int constTensor(Tensor tensor);  // never deduplicated
  // Appends as is (the assembler: indices follow declaration order).
  int addConstant(Constant constant);
  int numConstants() const { return static_cast<int>(constants_.size()); }
  const Constant& constant(int index) const { return constants_[static_cast<std::size_t>(index)]; }

  // A new function (index = creation order). The reference stays valid for the builder's life.
  FunctionBuilder& addFunction(std::string name);
  int findFunction(std::string_view name) const;
  int numFunctions() const { return static_cast<int>(functions_.size()); }
  FunctionBuilder& function(int index) { return *functions_[static_cast<std::size_t>(index)]; }

  // Patches labels, resolves named calls, computes counts; the first error of any function.
  Expected<Module> finish();

 private:
  std::string name_;
  std::string source_file_;
  std::vector<Constant> constants_;
  std::vector<std::unique_ptr<FunctionBuilder>> functions_;
};

}  // namespace shapevm
