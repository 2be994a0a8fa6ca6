# SPDX-License-Identifier: Apache-2.0
# Fixtures for the ONNX import tests: the shapevm binary (SHAPEVM_BIN, set by ctest) and the built
# Python package (SHAPEVM_PYTHON_DIR or build/python), as tests/python/conftest.py finds them.
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_BUILT_PYTHON = os.environ.get("SHAPEVM_PYTHON_DIR", str(ROOT / "build" / "python"))
if _BUILT_PYTHON and (Path(_BUILT_PYTHON) / "shapevm" / "__init__.py").is_file():
    sys.path.insert(0, str(_BUILT_PYTHON))


@pytest.fixture(scope="session")
def shapevm_bin():
    path = os.environ.get("SHAPEVM_BIN", str(ROOT / "build" / "tools" / "shapevm"))
    if not Path(path).exists():
        pytest.fail(f"shapevm binary not found at {path}; build first or set SHAPEVM_BIN")
    return path


@pytest.fixture
def run_cli(shapevm_bin):
    def run(*args, timeout=300):
        proc = subprocess.run([shapevm_bin, *map(str, args)], capture_output=True, text=True, timeout=timeout)
        return proc.returncode, proc.stdout, proc.stderr
    return run
