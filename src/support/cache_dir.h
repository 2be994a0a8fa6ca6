// SPDX-License-Identifier: Apache-2.0
// The one place that names ShapeVM's cache directory, shared by the tuning database (tune/) and
// the compiled-kernel cache (jit/): $SHAPEVM_CACHE_DIR, else $XDG_CACHE_HOME/shapevm, else
// $HOME/.cache/shapevm. Invariant: it only reads the environment; creating it is the writer's job.
#pragma once

#include <string>

namespace shapevm {

// The cache directory named by the environment; "" when none can be named.
std::string defaultCacheDir();

}  // namespace shapevm
