// SPDX-License-Identifier: Apache-2.0
// Loading and saving modules by file extension: `.svm` binary, `.svasm` text. Every load runs
// the verifier, so a module that comes back from loadModuleFile() is safe to interpret.
#pragma once

#include <string>

#include "bytecode/module.h"

namespace shapevm {

// Reads, parses (binary or text by extension) and verifies. Missing/unreadable file: IoError
// naming the path; unknown extension: InvalidArgument.
Expected<Module> loadModuleFile(const std::string& path);
// Writes `.svm` (binary) or `.svasm` (canonical text) by extension.
Status saveModuleFile(const Module& module, const std::string& path);

}  // namespace shapevm
