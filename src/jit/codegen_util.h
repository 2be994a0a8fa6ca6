// SPDX-License-Identifier: Apache-2.0
// IR-building helpers shared by the kernel families: the KernelArgs layout in IR, the kernel
// function declaration, typed element access (float16/bfloat16 widened to float32 on load and
// rounded on store), static-or-dynamic dims, and counted loops.
// Invariant: KernelArgs' IR layout is derived from the C++ struct's constants (static_asserts in
// codegen_util.cc), never written twice by hand.
#pragma once

#include <functional>
#include <string>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "jit/kernel_abi.h"

namespace shapevm::jit::ir {

using Builder = llvm::IRBuilder<>;

// `void <symbol>(ptr noalias nocapture readonly %args)` with an entry block; the builder is
// positioned at its end.
llvm::Function* beginKernel(llvm::Module& module, const std::string& symbol, Builder& builder);

// Reads of the KernelArgs block passed to the kernel.
class ArgsView {
 public:
  ArgsView(Builder& builder, llvm::Value* args) : b_(builder), args_(args) {}
  llvm::Value* data(int operand);                    // element pointer of operand
  llvm::Value* dim(int operand, int axis);           // i64, loaded
  llvm::Value* stride(int operand, int axis);        // i64, loaded (elements)
  llvm::Value* scalar(int index);                    // i64, loaded
  // The dim as a constant when the spec says it is static, else loaded.
  llvm::Value* dim(const OperandSpec& spec, int operand, int axis);

 private:
  Builder& b_;
  llvm::Value* args_;
};

// IR type of one stored element: float, half, bfloat, double, i32, i64, i8 (bool).
llvm::Type* elementType(llvm::LLVMContext& context, DType dtype);
// IR type in which float dtypes compute: float for f32/f16/bf16, double for f64.
llvm::Type* computeType(llvm::LLVMContext& context, DType dtype);
// `lanes` == 1: scalar; else <lanes x T>.
llvm::Type* withLanes(llvm::Type* scalar, unsigned lanes);

// Address of element `index` (i64) of a `dtype` array starting at `base`.
llvm::Value* elementPtr(Builder& b, DType dtype, llvm::Value* base, llvm::Value* index);
// Loads `lanes` consecutive elements at `ptr` and converts them to computeType(dtype)
// (bool -> i1 is NOT done here: bool loads as i8).
llvm::Value* loadCompute(Builder& b, DType dtype, llvm::Value* ptr, unsigned lanes = 1);
// bfloat16 bits (i16 lanes) <-> float32 lanes with integer ops, bit-identical to bf16ToFloat /
// floatToBf16 (round to nearest even, NaN kept quiet, denormals kept).
llvm::Value* bf16BitsToFloat(Builder& b, llvm::Value* bits);
llvm::Value* floatToBf16Bits(Builder& b, llvm::Value* value);
// Converts `value` (computeType lanes) to the storage type and stores `lanes` consecutive elements.
void storeCompute(Builder& b, DType dtype, llvm::Value* value, llvm::Value* ptr);
// Converts a compute value between dtypes with ShapeVM's cast semantics (float->int truncates
// toward zero with NaN -> 0 and saturation, int->float rounds, anything->bool is != 0).
llvm::Value* convert(Builder& b, llvm::Value* value, DType from, DType to);

// for (i = begin; i < end; i += step) body(i); i64 induction; returns after the loop.
void emitLoop(Builder& b, llvm::Value* begin, llvm::Value* end, std::int64_t step,
              const std::function<void(llvm::Value* index)>& body, const char* name = "i");

llvm::Value* constI64(Builder& b, std::int64_t value);

}  // namespace shapevm::jit::ir
