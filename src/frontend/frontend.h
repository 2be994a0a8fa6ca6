// SPDX-License-Identifier: Apache-2.0
// The ShapeVM Python frontend's entry points: compile a strict Python subset to a verified-ready
// Module, and load any program (.py compiled, .svm/.svasm read) by extension. Each optimization
// is switchable through FrontendOptions; `ops.identity(x)` is an anchor none of them removes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bytecode/module.h"

namespace shapevm {

struct FrontendOptions {
  bool dce = true;      // dead-code elimination
  bool reshape = true;  // merge consecutive reshapes
  bool addn = true;     // a + b + c (3+ tensor terms) -> add_n
  bool fold = true;     // constant folding of scalar/shape arithmetic
  // Inlining of small, non-recursive user functions and methods whose parameter checks the
  // call's arguments prove: the callee's ops join the caller's (one JIT region instead of one per
  // side of a call). They keep the callee's source lines; a runtime error in them names the
  // caller's function (the frame that ran them) and the callee's line. The debugger's step-in
  // and frames need it off (`--opt` without `inline`, or --no-opt).
  bool inline_calls = true;
  // When set, only this function (a name, `Class.method`, or a method name unique in the module)
  // and what it calls are compiled; it becomes function 0.
  std::string entry;
  // Registers of dead values are shared (linear scan) in every function, not only in one that
  // would exceed the bytecode's register limit (tests and differential runs switch it on).
  bool share_registers = false;

  static FrontendOptions none() {
    FrontendOptions o;
    o.dce = o.reshape = o.addn = o.fold = o.inline_calls = false;
    return o;
  }
  // Parses `--opt=` lists: "dce,reshape,addn,fold,inline" (any subset; "none" or "" = all off, "all" = all on).
  static Expected<FrontendOptions> parseList(std::string_view list);
};

// Compiles Python source. Errors: ParseError (syntax), Unsupported (constructs outside the
// subset), UnknownName (undefined names, unknown ops), InvalidArgument (arity, attributes), each
// "<filename>: <what> (line L, col C)".
Expected<Module> compilePython(std::string_view source, std::string_view filename, const FrontendOptions& options);

// compilePython, then the verifier. A module the frontend emitted that does not verify is its own
// bug (an "internal compiler error"), except a variable read on a path where it was never assigned
// (an `if`/`elif` without `else`, a loop that may not run): ShapeVM needs every variable assigned
// on every path before a read (CPython raises only when that path runs), so that is an
// UnknownName error naming the variable and the line.
Expected<Module> compileAndVerifyPython(std::string_view source, std::string_view filename,
                                        const FrontendOptions& options);

// `.py`: read, compileAndVerifyPython; `.svm`/`.svasm`: loadModuleFile (which verifies).
Expected<Module> loadProgram(const std::string& path, const FrontendOptions& options);

// Resolves a --fn name against a module: exact name, then a method name (`construct` for
// `Cell.construct`) when it is unique. Empty name: the only function, `main`, or a unique `*.construct`.
Expected<int> resolveFunction(const Module& module, const std::string& name);

namespace frontend {

// The Python signature of `ops.<op>` as the frontend binds it (derived from ops.def): each
// parameter's name and default ("None", "0", "float32", ...; nullopt = required); nullopt when
// the op has no `ops.` binding (slice).
struct PyParam {
  std::string name;
  std::optional<std::string> default_text;
};
std::optional<std::vector<PyParam>> opPythonParams(std::string_view op);

// The op table as JSON for tools and the Python oracle's consistency test (`shapevm ops --json`):
// one object per op with its schema columns and its Python parameters.
std::string opTableJson();

}  // namespace frontend
}  // namespace shapevm
