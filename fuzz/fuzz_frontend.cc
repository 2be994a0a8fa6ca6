// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the Python frontend (parse, lower, optimize, emit) and the verifier on its output.
// Invariant checked: any source gives a module or an error, never a crash; a module the
// frontend emits verifies (anything else is an internal compiler error, so a finding).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "bytecode/text_format.h"
#include "bytecode/verifier.h"
#include "frontend/frontend.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shapevm;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  FrontendOptions options;
  options.share_registers = size % 2 == 1;  // both register assignments
  auto module = compilePython(source, "fuzz.py", options);
  if (!module) return 0;
  if (!verifyModule(*module).isOk()) __builtin_trap();
  (void)disassemble(*module);
  return 0;
}
