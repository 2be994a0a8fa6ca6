// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the .svasm assembler, then the verifier and the disassembler of what it accepts.
// Invariant checked: any text gives a module or an error naming the line, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "bytecode/text_format.h"
#include "bytecode/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shapevm;
  auto module = assemble(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.svasm");
  if (!module) return 0;
  if (!verifyModule(*module).isOk()) return 0;
  (void)disassemble(*module);
  for (std::size_t i = 0; i < module->functions.size(); ++i) (void)pseudocode(*module, static_cast<int>(i));
  return 0;
}
