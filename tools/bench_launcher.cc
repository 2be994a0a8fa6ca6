// SPDX-License-Identifier: Apache-2.0
// Finds and execs shapevm_bench: $SHAPEVM_BENCH_BIN, else next to this executable (an install's
// bin/), else ../bench/ from it (the build tree: build/tools/shapevm -> build/bench/shapevm_bench).
#include "tools/bench_launcher.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace shapevm {

int launchBench(int argc, char** argv) {
  constexpr const char* kName = "shapevm_bench";
  std::vector<std::filesystem::path> candidates;
  if (const char* given = std::getenv("SHAPEVM_BENCH_BIN"); given != nullptr && *given != '\0') {
    candidates.emplace_back(given);
  } else {
    std::error_code error;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
    if (!error) {
      candidates.push_back(self.parent_path() / kName);
      candidates.push_back(self.parent_path().parent_path() / "bench" / kName);
    }
  }
  std::string looked;
  for (const std::filesystem::path& path : candidates) {
    looked += (looked.empty() ? "" : ", ") + path.string();
    if (::access(path.c_str(), X_OK) != 0) continue;
    std::vector<char*> args;
    std::string program = path.string();
    args.push_back(program.data());
    for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    ::execv(program.c_str(), args.data());
    fmt::print(stderr, "shapevm: error: cannot run {}: {}\n", program, std::strerror(errno));
    return 1;
  }
  fmt::print(stderr,
             "shapevm: error: `shapevm bench` runs the {} executable, which is not there (looked at {}); build it "
             "with `cmake --build build --target {}` (it needs -DSHAPEVM_BUILD_BENCH=ON) or set SHAPEVM_BENCH_BIN\n",
             kName, looked.empty() ? "nothing: /proc/self/exe is unreadable" : looked, kName);
  return 1;
}

}  // namespace shapevm
