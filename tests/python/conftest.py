# SPDX-License-Identifier: Apache-2.0
# Shared fixtures for the Python-side tests: the `shapevm` binary (SHAPEVM_BIN, set by ctest)
# and a helper that runs it and returns (exit code, stdout, stderr).
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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
