// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the .svm binary reader, then the verifier and the text views of what it accepts.
// Invariant checked: any byte string gives a module or an error, never a crash; a module that
// verifies prints (disassembly, pseudocode) and round-trips through the writer.
#include <cstddef>
#include <cstdint>
#include <span>

#include "bytecode/binary_format.h"
#include "bytecode/text_format.h"
#include "bytecode/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shapevm;
  auto module = deserializeModule(std::span<const std::uint8_t>(data, size), "fuzz.svm");
  if (!module) return 0;
  for (std::size_t i = 0; i < module->functions.size(); ++i) (void)pseudocode(*module, static_cast<int>(i));
  if (!verifyModule(*module).isOk()) return 0;
  (void)disassemble(*module);
  auto again = deserializeModule(serializeModule(*module), "fuzz.svm (rewritten)");
  if (!again) __builtin_trap();  // what the writer writes, the reader reads
  return 0;
}
