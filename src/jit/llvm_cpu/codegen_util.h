// SPDX-License-Identifier: Apache-2.0
// IR-building helpers shared by the kernel families: the KernelArgs layout in IR, the kernel
// function declaration, typed element access (float16/bfloat16 widened to float32 on load and
// rounded on store), static-or-dynamic dims, entry-block allocas, counted loops with loop metadata
// and if/else.
// Invariant: KernelArgs' IR layout is derived from the C++ struct's constants (static_asserts in
// codegen_util.cc), never written twice by hand.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

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
// loadCompute of as many lanes as `mask` (<lanes x i1>) has, reading only those where it holds
// (zeros elsewhere): a partial vector at a row's end.
llvm::Value* maskedLoadCompute(Builder& b, DType dtype, llvm::Value* ptr, llvm::Value* mask);
// bfloat16 bits (i16 lanes) <-> float32 lanes with integer ops, bit-identical to bf16ToFloat /
// floatToBf16 (round to nearest even, NaN kept quiet, denormals kept).
llvm::Value* bf16BitsToFloat(Builder& b, llvm::Value* bits);
llvm::Value* floatToBf16Bits(Builder& b, llvm::Value* value);
// Converts `value` (computeType lanes) to the storage type and stores `lanes` consecutive elements.
void storeCompute(Builder& b, DType dtype, llvm::Value* value, llvm::Value* ptr);
// Converts a compute value between dtypes with ShapeVM's cast semantics (float->int truncates
// toward zero with NaN -> 0 and saturation, int->float rounds, anything->bool is != 0).
llvm::Value* convert(Builder& b, llvm::Value* value, DType from, DType to);

// An alloca in the function's entry block (so SROA turns it into SSA values); `align` 0 keeps
// the type's preferred alignment.
llvm::AllocaInst* entryAlloca(Builder& b, llvm::Type* type, const char* name, std::uint64_t align = 0);

// What the O3 pipeline may do to a loop from emitLoop, as !llvm.loop metadata on its back edge.
// Generated kernels need it: without it LLVM fully unrolls loops with static trip counts and
// re-unrolls / re-vectorizes loops the generators already vectorized by hand, which costs seconds
// of compile time (2-10x) and icache-hostile code. The default attaches no metadata.
struct LoopHints {
  bool no_unroll = false;     // llvm.loop.unroll.disable
  bool no_vectorize = false;  // llvm.loop.vectorize.enable = false
  int vectorize_width = 0;    // > 0: llvm.loop.vectorize.width (1: stays scalar)
  int interleave_count = 0;   // > 0: llvm.loop.interleave.count (1: not interleaved)
  // llvm.loop.vectorize.followup_all: the loops the vectorizer produces are marked vectorized and
  // not to be unrolled (an unroll.disable on the original loop would also stop interleaving).
  bool no_unroll_after_vectorize = false;

  bool any() const {
    return no_unroll || no_vectorize || vectorize_width > 0 || interleave_count > 0 || no_unroll_after_vectorize;
  }
  // Left as emitted: not unrolled, vectorized or interleaved (loops vectorized by hand, short
  // tails, strided walks where extra copies only cost compile time).
  static constexpr LoopHints asEmitted() { return {.no_unroll = true, .no_vectorize = true, .interleave_count = 1}; }
};

// for (i = begin; i < end; i += step) body(i); i64 induction; returns after the loop. Blocks are
// named <name>.header / .body / .exit.
void emitLoop(Builder& b, llvm::Value* begin, llvm::Value* end, std::int64_t step,
              const std::function<void(llvm::Value* index)>& body, std::string_view name = "i",
              const LoopHints& hints = {});

// Emits `then_body` when `condition` holds, else `else_body`; continues after both.
void emitIfElse(Builder& b, llvm::Value* condition, const std::function<void()>& then_body,
                const std::function<void()>& else_body);

llvm::Value* constI64(Builder& b, std::int64_t value);

// A matmul's gate epilogue (KernelSpec::fused, see jit/kernel_abi.h), wherever the product comes
// from (the generated kernel's accumulator tile, or the product oneDNN wrote for its generated
// tail): the program's leaf and output views, read from the kernel's args, and one 16-lane column
// step of the program. Leaf l is the input slot spec.fused_leaf_source[l], or the product's
// column block -(source + 1) when negative; the outputs are the slots after the inputs.
struct GateView {
  int source = 0;  // fused_leaf_source (outputs: 0)
  int inner = 1;   // leaf_inner: 0 = one value broadcast over the lanes, else contiguous lanes
  llvm::Value* data = nullptr;
  std::vector<llvm::Value*> strides;  // over the iteration's leading axes (the program's rank - 1)
};
struct GateViews {
  GateViews(ArgsView& args, const KernelSpec& spec);
  std::vector<GateView> leaves, outputs;
};
// The program at columns col..col+lanes of the row whose index over the leading axes is `at`:
// its leaves loaded (a product block from `product(block)`), its nodes computed (FusedValues),
// its outputs stored.
void emitGateColumns(Builder& b, const KernelSpec& spec, const GateViews& views, const std::vector<llvm::Value*>& at,
                     llvm::Value* col, unsigned lanes, const std::function<llvm::Value*(int block)>& product);

// A float32 -> float32 function (an expensive element function: a transcendental's polynomial)
// emitted ONCE per module instead of once per loop that uses it: the call at the builder's
// position goes to the internal function `name` (float -> float, defined on first use with
// `body`), and carries vector variants `name`_v<N> (<N x float> -> <N x float>, the same body) for
// each N of `vector_lanes`, so the loop vectorizer widens the call instead of the body. Each loop
// variant (flat, broadcast, strided, and their scalar remainders) then holds one call, and LLVM
// optimizes and compiles the body once per lane count. The functions read and write no memory;
// the kernel pipelines run no inliner, and the engine drops the variants no loop called.
llvm::Value* callElementFunction(Builder& b, const std::string& name, llvm::Value* x,
                                 const std::function<llvm::Value*(Builder& builder, llvm::Value* x)>& body,
                                 const std::vector<unsigned>& vector_lanes);

// A per-thread buffer of at least `bytes`, 64-byte aligned, grown in `granule`-byte steps and kept
// for the thread's life (nullptr when the allocation fails). Each `Tag` type is its own buffer, so
// a runner's tile and the kernel it calls never share one.
template <typename Tag>
void* threadBuffer(std::int64_t bytes, std::int64_t granule) {
  struct Buffer {
    void* data = nullptr;
    std::int64_t size = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffer;
  if (buffer.size < bytes) {
    std::free(buffer.data);
    const std::int64_t rounded = (bytes + granule - 1) / granule * granule;
    buffer.data = std::aligned_alloc(64, static_cast<std::size_t>(rounded));
    buffer.size = buffer.data != nullptr ? rounded : 0;
  }
  return buffer.data;
}

}  // namespace shapevm::jit::ir
