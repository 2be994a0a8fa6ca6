// SPDX-License-Identifier: Apache-2.0
// The .svasm text assembly: assemble() reads it, disassemble() writes its canonical form.
// Invariants: assemble(disassemble(m)) serializes to the same bytes as m (for verified modules
// built in PC order), and disassemble(assemble(canonical text)) == that text byte for byte.
// Plain instructions are parsed and printed from opcodes.def's role letters; only CallOp, Call
// and the register-list roles have their own syntax.
//
// Syntax (one item per line; `;` starts a comment outside string literals; blank lines ignored):
//   .module "lstm_cell"                       module name (quoted string, C escapes)
//   .source "lstm.py"                         source file of the line table (optional)
//   .const k0 = int 3                         constants, index order; kinds:
//       none | int -5 | float 2.5 (shortest round-trip, nan, inf, -inf) | bool true
//       | string "text\n" | ints [1,2,3] | tensor f32[2,2] {1, 2.5, 3, 4}
//     On input a constant may be named (`.const msg = string "..."`) and referenced by name.
//   .func cell                                a function, up to `.end`
//     .param x : f32[?0,?1,128]               tensor parameter with its shape token
//     .param n : int                          scalar parameter: int, float or bool
//     .dim ?0 batch                           name of dynamic dim ?0 (`.dim ?1` = unnamed)
//     .outputs 2                              number of output slots
//     .registers 8                            optional on input (default: max register + 1)
//     .loops 1                                optional on input (default: max loop id + 1)
//     .loc 12 5                               source line/col of the following instructions
//     0x0000  LoadTensor r0, p0  ; x          PC prefix optional on input, checked when given
//     loop:                                   a label (input only; output uses @0xNNNN)
//     0x0004  BranchIf r2, @0x0007, @loop     targets: @0xNNNN (a PC) or @label
//   .end
// Operands by role letter: D/r `r3`, k `k0` (or a constant name), p `p0` (or the parameter
// name), o `o1`, t `@0x0007`, l `l0`, n `-1`, v/V `[r1, r2]`.
// Special forms:
//   CallOp matmul r3 = r1, r2 : [?0,128] x [128,1024] -> [?0,1024]
//   CallOp split r4, r5, r6, r7 = r3 {axis=1, sections=4} : [?0,1024] -> [?0,256], [?0,256], ...
//   CallOp layer_norm r2 = r0, none, r1 : [?0,64] x _ x [64] -> [?0,64]
//     outputs `=` inputs (`none` = omitted optional input), then the explicitly given attributes in
//     schema order, then `:` input tokens joined by ` x `, `->`, output tokens joined by `, `
//     (`_` for a non-tensor operand). Attributes and tokens are optional on input.
//   Call cell r5, r6 = r1, r2                 results `=` arguments (either side may be empty)
// Canonical output: PCs as `0x%04X`, `.registers` always, `.loops`/`.source` when
// nonzero/non-empty, `.loc` only when it changes, and a `; name`/`; value` comment after
// parameter and constant operands.
#pragma once

#include <string>
#include <string_view>

#include "bytecode/module.h"

namespace shapevm {

// Parses .svasm text. Errors are ParseError "file:line:col: expected ..., got '...'".
Expected<Module> assemble(std::string_view text, std::string_view filename);

// Canonical .svasm text of the whole module / of one function (its `.func` .. `.end` block).
std::string disassemble(const Module& module);
std::string disassembleFunction(const Module& module, int function);

// Options for an annotated listing. With `source_text` (the text of module.source_file), each
// statement's source line is printed as a `; 12: h = o * ops.tanh(c)` comment before its `.loc`;
// comments are ignored by the assembler, so the listing still assembles. Empty = canonical.
struct DisassembleOptions {
  std::string_view source_text;
};
std::string disassemble(const Module& module, const DisassembleOptions& options);
std::string disassembleFunction(const Module& module, int function, const DisassembleOptions& options);

// `text` as a double-quoted string with C escapes; bytes outside printable ASCII become \xNN, so
// names read from a damaged file print safely in messages.
std::string quoteString(std::string_view text);

// The text of one constant's value as written after `=` ("int 3", "tensor f32[2] {1, 2}").
std::string constantText(const Constant& constant);

// A Python-like view of one function, with PCs:
//   0x0001  r3 = matmul(r1, r2)  # [?0,128] x [128,1024] -> [?0,1024]
//   0x0003  if r2: goto 0x0007 else goto 0x0005
std::string pseudocode(const Module& module, int function);

}  // namespace shapevm
