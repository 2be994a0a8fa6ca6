// SPDX-License-Identifier: Apache-2.0
// ShapeVM's cache directory from the environment (see cache_dir.h).
#include "support/cache_dir.h"

#include <cstdlib>

namespace shapevm {

namespace {
std::string envOrEmpty(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}
}  // namespace

std::string defaultCacheDir() {
  if (std::string dir = envOrEmpty("SHAPEVM_CACHE_DIR"); !dir.empty()) return dir;
  if (std::string xdg = envOrEmpty("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/shapevm";
  if (std::string home = envOrEmpty("HOME"); !home.empty()) return home + "/.cache/shapevm";
  return {};
}

}  // namespace shapevm
