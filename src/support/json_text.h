// SPDX-License-Identifier: Apache-2.0
// JSON string literals for the hand-assembled JSON the tools write (trace files, profiles, stats,
// the op table): one escaper, so every writer quotes the same way.
// Invariant: the result is a valid JSON string literal for any input bytes; `"`, `\` and control
// characters are escaped, other bytes pass through unchanged.
#pragma once

#include <string>
#include <string_view>

namespace shapevm {

// Appends `text` as a quoted JSON string to `out`.
void appendJsonString(std::string& out, std::string_view text);
// `text` as a quoted JSON string.
std::string jsonString(std::string_view text);

}  // namespace shapevm
