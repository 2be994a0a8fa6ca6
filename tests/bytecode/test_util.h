// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the bytecode tests: reading test data files and assembling inline text.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bytecode/text_format.h"

namespace shapevm::testing {

inline std::string testDataDir(const std::string& folder) { return std::string(SHAPEVM_SOURCE_DIR) + "/tests/" + folder; }

inline std::string readText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Files in tests/<folder> whose names end with `suffix`, sorted.
inline std::vector<std::filesystem::path> dataFiles(const std::string& folder, const std::string& suffix) {
  std::vector<std::filesystem::path> out;
  for (const auto& entry : std::filesystem::directory_iterator(testDataDir(folder))) {
    const std::string name = entry.path().filename().string();
    if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.push_back(entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Drops the leading `;` comment lines (a golden file's description).
inline std::string withoutHeader(const std::string& text) {
  std::size_t pos = 0;
  while (pos < text.size() && text[pos] == ';') {
    std::size_t end = text.find('\n', pos);
    pos = end == std::string::npos ? text.size() : end + 1;
  }
  return text.substr(pos);
}

// Assembles text that must be valid; fails the test otherwise.
inline Module assembleOk(const std::string& text) {
  auto module = assemble(text, "test.svasm");
  EXPECT_TRUE(module.hasValue()) << module.status().toString();
  return module ? std::move(*module) : Module();
}

}  // namespace shapevm::testing
