// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the tuning database's line parser (one JSON line of tuning.jsonl).
// Invariant checked: any line gives a record or an error; a record re-serializes to a line
// that parses to the same record text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tune/tuning_db.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shapevm::tune;
  auto record = parseRecord(std::string(reinterpret_cast<const char*>(data), size));
  if (!record) return 0;
  const std::string line = recordToJson(*record);
  auto again = parseRecord(line);
  if (!again || recordToJson(*again) != line) __builtin_trap();
  return 0;
}
