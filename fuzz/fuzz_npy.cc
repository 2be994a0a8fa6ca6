// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the .npy parser on the bytes, and the .npz reader on the same bytes as a file.
// Invariant checked: any bytes give a tensor (whose every element reads) or an error.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "shapevm/npy.h"

namespace {

void touch(const shapevm::Tensor& t) {
  double sum = 0;
  for (std::int64_t i = 0; i < t.numel() && i < 4096; ++i) sum += t.elementAsDouble(i);
  (void)sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shapevm;
  if (auto t = parseNpy(std::span<const std::uint8_t>(data, size), "fuzz.npy")) touch(*t);
  // readNpz reads a path: the bytes go to a per-process file (tmpfs when there is one).
  static const std::string path = (access("/dev/shm", W_OK) == 0 ? std::string("/dev/shm") : std::string("/tmp")) +
                                  "/svm_fuzz_" + std::to_string(getpid()) + ".npz";
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
    if (auto arrays = readNpz(path)) {
      for (const auto& [name, t] : *arrays) touch(t);
    }
  }
  return 0;
}
