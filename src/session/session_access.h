// SPDX-License-Identifier: Apache-2.0
// In-tree access to the parts behind a Session (the CLI's profile, tuning summary and --dump;
// the bench's per-run counters and JIT internals). Not installed: outside code uses only
// include/shapevm/shapevm.h. Pointers are owned by the Session and valid until its next
// load(), jit_level change or destruction; jit()/tuner() are nullptr when none is attached.
#pragma once

#include <memory>

#include "shapevm/shapevm.h"

namespace shapevm {

struct Module;
class VirtualMachine;
namespace jit {
class Jit;
}
namespace tune {
class AutoTuner;
}

struct SessionAccess {
  static std::shared_ptr<Module> module(const Session& session);
  static VirtualMachine* vm(Session& session);
  static jit::Jit* jit(Session& session);
  static tune::AutoTuner* tuner(Session& session);
  // Stops and drops the JIT (its compile thread; the VM keeps its unpatched interpreter state).
  static void stopJit(Session& session);
  // Cancels the JIT's compiles without waiting (stopJit() then only joins); true when no compile
  // is still running after `timeout_ms` (or there is no JIT).
  static bool cancelJit(Session& session, int timeout_ms);
};

}  // namespace shapevm
