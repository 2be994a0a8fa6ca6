// SPDX-License-Identifier: Apache-2.0
// `shapevm dump MODULE [--fn NAME] -o OUT.svasm|OUT.svm` and `run --dump`: write a module, or one
// function with the functions it calls, as text or binary. After a run the caller passes the JIT's
// installed entries per CallOp PC; the text form shows them as `; jit:` comments (the assembler
// ignores comments, so every dump assembles back to the same module).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bytecode/module.h"

namespace shapevm {

class VirtualMachine;
namespace jit {
class Jit;
}

// Comment lines (without the `;`) to print after the instruction at (function, pc); may be empty.
using DumpNotes = std::function<std::vector<std::string>(int function, int pc)>;

// `function` (a resolved index) and the functions it calls, transitively, as a module of their
// own: callee indices renumbered, constants and the source file kept.
Expected<Module> extractFunction(const Module& module, int function);

// The canonical .svasm text of `module` with `notes` (may be empty) after their instructions and,
// when the source file is readable, each statement's source line as a comment.
std::string dumpText(const Module& module, const DumpNotes& notes);

// Writes `module` (or only `function_name` and its callees, "" = all) to `path` by extension.
Status writeDump(const Module& module, const std::string& function_name, const std::string& path,
                 const DumpNotes& notes);

#if SHAPEVM_HAVE_JIT
// The JIT's view of the CallOp at (function, pc), one line each: every installed entry (kernel
// symbol, guard, launches; regions with their range and fused ops) and, with `state`, the site's
// tiering phase, guard misses with the reason the newest profiled signature misses, and the fused
// ranges covering the site with their declines. Empty for a PC that is not a CallOp.
std::vector<std::string> jitSiteNotes(jit::Jit& jit, VirtualMachine& vm, int function, int pc, bool state);
#endif

}  // namespace shapevm
