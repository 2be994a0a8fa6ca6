// SPDX-License-Identifier: Apache-2.0
// `shapevm dap`: the debugger core over the Debug Adapter Protocol on stdio (Content-Length framed
// JSON), so VS Code or any DAP client debugs a program by its source lines. Single-threaded: the
// program runs inside the `launch` request and, at each stop, the adapter serves requests until one
// resumes it. The program's own output goes to stderr (stdout carries only the protocol). A
// malformed message or an unknown request gets an error response and the session goes on.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tools/debug_command.h"

namespace shapevm {

// Runs `shapevm run ARGS` driven by `hooks` and returns its exit code; an error when ARGS do not parse.
using DapRunner = std::function<Expected<int>(const std::vector<std::string>& args, std::shared_ptr<RunHooks> hooks)>;

// Serves one DAP session on stdin/stdout; returns the exit code.
int dapCommand(const DapRunner& runner);

}  // namespace shapevm
