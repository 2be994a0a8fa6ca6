# SPDX-License-Identifier: Apache-2.0
# `shapevm cache stats|clear|export DIR|import DIR` and the compiled-kernel cache seen from the CLI:
# a second process installs every kernel from the cache (0 LLVM codegens in --stats), a replica
# that imported an exported cache does too, damaged entries are warned about and recompiled.
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

RUN = ["run", str(ROOT / "examples" / "lstm_cell.py"), "--dim", "batch=4", "--dim", "seq=3", "--iters", "3",
       "--jit-level", "O1", "--warmup", "0", "--hot-count", "1", "--hot-ms", "0", "--jit-wait", "--stats", "-q"]


def cli(shapevm_bin, cache, *args):
    env = dict(os.environ, SHAPEVM_CACHE_DIR=str(cache))
    proc = subprocess.run([shapevm_bin, *map(str, args)], capture_output=True, text=True, timeout=600, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def cache_line(out):
    m = re.search(r"kernel cache: (\d+) kernels from the cache, (\d+) LLVM codegens", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def test_second_process_export_import_and_clear(shapevm_bin, tmp_path):
    warm, replica, shipped = tmp_path / "warm", tmp_path / "replica", tmp_path / "shipped"
    code, out, err = cli(shapevm_bin, warm, *RUN)
    assert code == 0, err
    _, codegens = cache_line(out)
    assert codegens > 0
    code, out, err = cli(shapevm_bin, warm, *RUN)
    assert code == 0, err
    from_cache, codegens = cache_line(out)
    assert codegens == 0 and from_cache > 0, out

    code, out, err = cli(shapevm_bin, warm, "cache", "stats")
    assert code == 0, err
    kernels = int(re.search(r"(\d+) kernels, ", out).group(1))
    assert kernels > 0, out
    code, out, err = cli(shapevm_bin, warm, "cache", "export", shipped)
    assert code == 0, err
    assert len(list((shipped / "kernels").glob("*.svmk"))) == kernels
    # A damaged file in the shipment is skipped with a warning.
    (shipped / "kernels" / "0000000000000000.svmk").write_bytes(b"garbage")
    code, out, err = cli(shapevm_bin, replica, "cache", "import", shipped)
    assert code == 0, err
    assert f"imported {kernels} kernels" in out
    assert "not importing" in err
    code, out, err = cli(shapevm_bin, replica, *RUN)
    assert code == 0, err
    assert cache_line(out)[1] == 0, "the replica compiles nothing"

    code, out, err = cli(shapevm_bin, replica, "cache", "clear")
    assert code == 0, err
    assert not list((replica / "kernels").glob("*.svmk"))


def test_damaged_entries_warn_and_recompile(shapevm_bin, tmp_path):
    cache = tmp_path / "c"
    assert cli(shapevm_bin, cache, *RUN)[0] == 0
    files = sorted((cache / "kernels").glob("*.svmk"))
    assert files
    files[0].write_bytes(files[0].read_bytes()[: files[0].stat().st_size // 2])  # truncated mid-write
    code, out, err = cli(shapevm_bin, cache, *RUN)
    assert code == 0, err
    assert "kernel cache: ignoring" in err
    assert cache_line(out)[1] >= 1


@pytest.mark.parametrize("args,message", [
    (["cache", "export"], "needs a directory"),
    (["cache", "import", "/nonexistent/shapevm-cache"], "is not a directory"),
    (["cache", "frobnicate"], "frobnicate"),
    (["run", str(ROOT / "examples" / "lstm_cell.py"), "--set", "cache_max_mb=lots"], "cache_max_mb"),
])
def test_bad_cache_input_fails_clearly(shapevm_bin, tmp_path, args, message):
    code, out, err = cli(shapevm_bin, tmp_path, *args)
    assert code != 0
    assert message in out + err
