// SPDX-License-Identifier: Apache-2.0
// Recursive-descent parser for the ShapeVM Python subset. Constructs outside the subset
// (lambda, comprehensions, try/with, dicts, ...) are rejected here with a message that names
// the construct and its line/col; syntax errors name the expected token.
#pragma once

#include <string_view>

#include "frontend/ast.h"
#include "shapevm/status.h"

namespace shapevm::frontend {

Expected<ModuleAst> parseModule(std::string_view source);

}  // namespace shapevm::frontend
