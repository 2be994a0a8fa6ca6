// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the ONNX importer (protobuf parse, opset and op checks, shape inference, pattern
// recognition, every node handler, folding) on arbitrary model bytes, without external data.
// Invariant checked: any byte string gives a verified module or an error, never a crash; what it
// accepts disassembles.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "bytecode/text_format.h"
#include "onnx/onnx_import.h"
#include "support/tunables.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shapevm;
  static const bool limited = [] {  // a fuzzed initializer may declare any size: keep allocations small
    (void)Tunables::set(Tunable::MaxTensorBytes, std::int64_t{16} << 20);
    return true;
  }();
  (void)limited;
  auto module = importOnnxBytes(std::string_view(reinterpret_cast<const char*>(data), size), "", "fuzz.onnx");
  if (!module) return 0;
  (void)disassemble(*module);
  return 0;
}
