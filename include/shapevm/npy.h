// SPDX-License-Identifier: Apache-2.0
// numpy .npy / .npz files: read (format versions 1.0-3.0, C or Fortran order, either byte order,
// npz members stored or deflated) and write (version 1.0, C order, little-endian).
// Invariant: malformed or unsupported input is a Status naming the file (and npz member), never
// a crash. Readable dtypes: f2 f4 f8 i4 i8 b1; bfloat16 has no numpy dtype and is written as float32.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shapevm/status.h"
#include "shapevm/tensor.h"

namespace shapevm {

// Reads one .npy file into a fresh contiguous tensor.
Expected<Tensor> readNpy(const std::string& path);
// Parses .npy bytes held in memory; `what` names the source in errors (a path, "x.npz:w").
Expected<Tensor> parseNpy(std::span<const std::uint8_t> bytes, std::string_view what);

// Writes any tensor (views included) as a C-order little-endian .npy file; bfloat16 becomes
// float32 ('<f4'), since numpy has no bfloat16 dtype.
Status writeNpy(const std::string& path, const Tensor& tensor);
// The .npy file writeNpy would write, as bytes. `tensor` must be defined.
std::vector<std::uint8_t> serializeNpy(const Tensor& tensor);

// The arrays of an .npz archive in archive order, named without the ".npy" suffix.
Expected<std::vector<std::pair<std::string, Tensor>>> readNpz(const std::string& path);

enum class NpzCompression : std::uint8_t {
  Stored,    // numpy.savez
  Deflated,  // numpy.savez_compressed
};
// Writes an .npz archive (member NAME.npy per entry, in the given order); names must be
// non-empty and distinct.
Status writeNpz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                NpzCompression compression = NpzCompression::Stored);

}  // namespace shapevm
