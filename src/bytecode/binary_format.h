// SPDX-License-Identifier: Apache-2.0
// The .svm binary module. Layout (all integers little-endian):
//   header   "SVM\x01" magic, u32 version (kSvmVersion), u32 CRC32 (zlib) of the payload,
//            u64 payload size
//   payload  sections in this order, each u32 tag + u64 length + bytes:
//            META (module name, source file), CNST (constant pool incl. tensors: dtype, shape,
//            raw data), FUNC (functions: header counts, params with shape tokens, dim names,
//            code, op sites, call sites, operand pool), LINE (per function, run-length source
//            locations: start PC, line, col)
// Invariant: the reader is bounds-checked everywhere and never trusts a count beyond the bytes
// left; any malformed input is BadFormat naming the file, the offset and the field.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "bytecode/module.h"

namespace shapevm {

// Version 2 removed the JitEnter opcode (number 13 in version 1; later opcodes moved down by one)
// and the per-function JIT region count. Version 1 files still load when they use neither.
inline constexpr std::uint32_t kSvmVersion = 2;
inline constexpr std::uint32_t kSvmOldestVersion = 1;
inline constexpr std::size_t kSvmHeaderSize = 20;  // magic, version, crc, payload size

std::vector<std::uint8_t> serializeModule(const Module& module);
// `what` names the input in errors (usually the file path). Does not verify.
Expected<Module> deserializeModule(std::span<const std::uint8_t> bytes, std::string_view what);

}  // namespace shapevm
