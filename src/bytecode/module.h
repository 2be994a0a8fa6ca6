// SPDX-License-Identifier: Apache-2.0
// The in-memory bytecode module: constant pool, functions with their code, op sites, call
// sites, operand pool, parameters with shape tokens and the source-line table. This is the
// static program; runtime state (dispatch slots, counters, profiles) lives in the VM, in arrays
// parallel to these tables. Shape tokens may be rewritten in place (the JIT's view of a site's
// shapes) through rewriteSiteToken(), which is serialized with readers that print them.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "bytecode/opcodes.h"
#include "bytecode/shape_token.h"
#include "ops/registry.h"
#include "shapevm/value.h"

namespace shapevm {

enum class ConstKind : std::uint8_t { None, Int, Float, Bool, String, Tensor, Ints };

struct Constant {
  ConstKind kind = ConstKind::None;
  Value value;       // Int/Float/Bool/Tensor/Ints(tuple of ints); None for None/String
  std::string text;  // String constants (assert messages)
};

// One CallOp site: the op, its operands and attributes, and its shape tokens.
struct OpSite {
  OpId op = OpId::Identity;
  std::vector<std::int32_t> inputs;   // registers; -1 = an omitted optional input (None)
  std::vector<std::int32_t> outputs;  // registers
  std::vector<AttrValue> attrs;       // all attributes in schema order (defaults filled)
  std::uint64_t attrs_given = 0;      // bit i set: attribute i was written explicitly (printed back)
  std::vector<TensorDescriptor> input_tokens;   // one per input (`_` for non-tensors)
  std::vector<TensorDescriptor> output_tokens;  // one per output
};

// One Call site: a user-function call.
struct CallSite {
  std::int32_t callee = 0;            // function index
  std::vector<std::int32_t> args;     // registers, in parameter order
  std::vector<std::int32_t> results;  // registers, in output-slot order
};

struct Param {
  std::string name;
  ValueKind kind = ValueKind::Tensor;  // Tensor, Int, Float or Bool
  TensorDescriptor token;              // for tensors
};

struct SourceLoc {
  std::int32_t line = 0;  // 0 = unknown
  std::int32_t col = 0;
  // Inlined code (frontend/inline.cc): the index in Function::inlined_functions of the function
  // whose line this is; -1 = the function's own code. Debug info, not serialized.
  std::int32_t inlined = -1;
  bool operator==(const SourceLoc& other) const = default;
};

struct Function {
  std::string name;
  std::vector<Param> params;
  std::int32_t num_outputs = 0;
  std::int32_t num_registers = 0;
  std::int32_t num_loops = 0;          // loop-region ids are 0..num_loops-1
  std::vector<std::string> dim_names;  // per dynamic dim id: its name ("batch") or ""
  std::vector<Instruction> code;
  std::vector<SourceLoc> locs;         // parallel to code
  std::vector<OpSite> op_sites;
  std::vector<CallSite> call_sites;
  std::vector<std::int32_t> operand_pool;  // register lists of TuplePack/TupleUnpack
  // Debug info from the frontend (not serialized): per register, the source variable it holds
  // ("" = a temporary or unknown; empty when the module came from a file).
  std::vector<std::string> register_names;
  // The functions inlined into this one (SourceLoc::inlined indexes it; debug info, not serialized).
  std::vector<std::string> inlined_functions;
  int paramIndex(std::string_view param_name) const;
  int dimId(std::string_view dim_name) const;  // -1 if no dim has this name
};

struct Module {
  std::string name;
  std::string source_file;  // where the source-line table points ("" if none)
  std::vector<Constant> constants;
  std::vector<Function> functions;

  int findFunction(std::string_view function_name) const;  // -1 if absent

  // Rewrites one shape token of an op site in place (e.g. [?0,128] -> [320..960,128]).
  // Thread-safe against tokenSnapshot() and the printers.
  Status rewriteSiteToken(int function, int site, bool output, int operand, const TensorDescriptor& token);
  TensorDescriptor tokenSnapshot(int function, int site, bool output, int operand) const;
  std::mutex& tokenMutex() const { return token_mutex_; }

  Module() = default;
  Module(const Module& other);
  Module& operator=(const Module& other);
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;

 private:
  mutable std::mutex token_mutex_;
};

}  // namespace shapevm
