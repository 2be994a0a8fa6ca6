# SPDX-License-Identifier: Apache-2.0
# Tests scripts/check_layering.py itself on small synthetic source trees: a clean tree passes, and
# each kind of violation (a layer above, a sibling layer, the interpreter including the JIT, a
# public header reaching up, a folder missing from the table, an include that resolves nowhere, a
# backend header included past the backend seam)
# fails with a line naming the file, the include and the layers involved.
import pathlib
import subprocess
import sys

import pytest

CHECKER = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "check_layering.py"

CLEAN_TREE = {
    "include/shapevm/status.h": '#include "shapevm/errors.def"\n',
    "include/shapevm/errors.def": "",
    "include/shapevm/tensor.h": '#include "shapevm/status.h"\n',
    "src/support/logging.h": '#include "shapevm/status.h"\n',
    "src/tensor/tensor.cc": '#include "shapevm/tensor.h"\n#include "support/logging.h"\n',
    "src/ops/ops.def": "",
    "src/ops/registry.h": '#include "ops.def"\n#include <vector>\n',
    "src/bytecode/module.h": '#include "ops/registry.h"\n',
    "src/frontend/lowering.cc": '#include "bytecode/module.h"\n',
    "src/vm/interpreter.cc": '#include "bytecode/module.h"\n#include "vm/interpreter.h"\n',
    "src/vm/interpreter.h": "",
    "src/jit/jit.cc": '#include "vm/interpreter.h"\n#include "frontend/lowering.cc"\n',
    "src/jit/llvm_cpu/engine.h": "",
    "src/jit/backend_registry.cc": '#include "jit/llvm_cpu/engine.h"\n',
    "src/tune/tuner.cc": '#include "jit/jit.cc"\n',
    "src/session/session.cc": '#include "tune/tuner.cc"\n#include "shapevm/shapevm.h"\n',
    "include/shapevm/shapevm.h": '#include "shapevm/tensor.h"\n',
}


def runChecker(tmp_path, overrides):
    files = dict(CLEAN_TREE)
    files.update(overrides)
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = subprocess.run([sys.executable, str(CHECKER), "--root", str(tmp_path)],
                            capture_output=True, text=True, check=False)
    return result.returncode, result.stdout


def test_clean_tree_passes(tmp_path):
    code, out = runChecker(tmp_path, {})
    assert code == 0, out
    assert "check_layering: ok (17 files)" in out


@pytest.mark.parametrize("file, text, expected", [
    ("src/ops/registry.h", '#include "bytecode/module.h"\n',
     'src/ops/registry.h:1: layer ops includes "bytecode/module.h" from a layer above it (bytecode)'),
    ("src/vm/interpreter.cc", '\n#include "frontend/lowering.cc"\n',
     'src/vm/interpreter.cc:2: layer vm includes "frontend/lowering.cc" from a sibling layer (frontend)'),
    ("src/frontend/lowering.cc", '#include "vm/interpreter.h"\n',
     'src/frontend/lowering.cc:1: layer frontend includes "vm/interpreter.h" from a sibling layer (vm)'),
    ("src/vm/interpreter.h", '#  include "jit/jit.cc"\n',
     'src/vm/interpreter.h:1: layer vm includes "jit/jit.cc" from a layer above it (jit)'),
    ("src/jit/jit.cc", '#include "tune/tuner.cc"\n',
     'src/jit/jit.cc:1: layer jit includes "tune/tuner.cc" from a layer above it (tune)'),
    ("include/shapevm/tensor.h", '#include "ops/registry.h"\n',
     'include/shapevm/tensor.h:1: layer tensor includes "ops/registry.h" from a layer above it (ops)'),
    ("src/support/logging.h", '#include "shapevm/shapevm.h"\n',
     'src/support/logging.h:1: layer support includes "shapevm/shapevm.h" from a layer above it (session)'),
    ("src/jit/jit.cc", '#include "jit/llvm_cpu/engine.h"\n',
     'src/jit/jit.cc:1: includes "jit/llvm_cpu/engine.h": a backend\'s headers are included only by the backend'),
    ("src/tune/tuner.cc", '#include "jit/llvm_cpu/engine.h"\n',
     'src/tune/tuner.cc:1: includes "jit/llvm_cpu/engine.h": a backend\'s headers are included only by the backend'),
    ("src/backend/cpu.h", "",
     "src/backend/cpu.h: not in any layer of the table"),
    ("src/tensor/tensor.cc", '#include "tensor/missing.h"\n',
     'src/tensor/tensor.cc:1: "tensor/missing.h" is not a header under src/ or include/'),
])
def test_violation_fails_and_names_it(tmp_path, file, text, expected):
    code, out = runChecker(tmp_path, {file: text})
    assert code == 1, out
    assert expected in out
    assert len(out.strip().splitlines()) == 1, out  # exactly the one violation


def test_system_includes_and_comments_are_ignored(tmp_path):
    code, out = runChecker(tmp_path, {"src/ops/registry.h": '#include <llvm/IR/Module.h>\n// see "jit/jit.cc"\n'})
    assert code == 0, out


def test_source_tree_passes():
    result = subprocess.run([sys.executable, str(CHECKER)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
