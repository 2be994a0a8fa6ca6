# SPDX-License-Identifier: Apache-2.0
# `shapevm dump` and `run --dump`: dumps round-trip (the .svasm dump assembles to the bytes of the
# .svm dump, and both run like the source), `--fn` writes one function and what it calls, and after
# a run at O1 and O2 the dump shows the tokens the JIT rewrote and its installed entries as comments.
import re

import pytest

from conftest import ROOT

LOOP = ROOT / "examples" / "lstm_loop.py"
CELL = ROOT / "examples" / "lstm_cell.py"
PROGRAM = ROOT / "tests" / "python" / "debug" / "loop_call.py"


def code_lines(text):
    """The listing without full-line comments (source lines, JIT notes)."""
    return [line for line in text.splitlines() if not line.strip().startswith(";")]


def test_dump_round_trips(run_cli, tmp_path):
    text, binary, again = tmp_path / "cell.svasm", tmp_path / "cell.svm", tmp_path / "again.svm"
    assert run_cli("dump", CELL, "-o", text)[0] == 0
    assert run_cli("dump", CELL, "-o", binary)[0] == 0
    code, _, err = run_cli("asm", text, "-o", again)
    assert code == 0, err
    assert again.read_bytes() == binary.read_bytes()
    # The source lines are comments beside the code; the code is exactly `dis`'s.
    assert "; 15: gx = rows @ W_ih.T + b_ih" in text.read_text()
    code, dis, _ = run_cli("dis", binary)
    assert code_lines(dis) == code_lines(text.read_text())
    runs = [run_cli("run", path, "--dim", "batch=2", "--dim", "seq=3", "--jit-level", "O0")[1] for path in (CELL, text, binary)]
    assert runs[0] == runs[1] == runs[2] and "out0" in runs[0]


def test_dump_one_function(run_cli, tmp_path):
    out = tmp_path / "scale.svasm"
    code, _, err = run_cli("dump", PROGRAM, "--fn", "scale", "-o", out)
    assert code == 0, err
    text = out.read_text()
    assert text.count(".func ") == 1 and ".func scale" in text
    # A function that calls another brings its callee along (inlining off), and the dump assembles
    # and runs; with every optimization the small callee is inlined and only main is left.
    out = tmp_path / "main.svm"
    assert run_cli("dump", PROGRAM, "--fn", "main", "--opt", "dce,reshape,addn,fold", "-o", out)[0] == 0
    code, dis, _ = run_cli("dis", out)
    assert ".func main" in dis and ".func scale" in dis
    code, ran, err = run_cli("run", out, "--fn", "main", "--arg", "steps=2", "--dim", "n=3")
    assert code == 0 and "out0" in ran, err
    inlined = tmp_path / "main_inlined.svm"
    assert run_cli("dump", PROGRAM, "--fn", "main", "-o", inlined)[0] == 0
    code, dis, _ = run_cli("dis", inlined)
    assert ".func main" in dis and ".func scale" not in dis, dis
    code, ran_inlined, err = run_cli("run", inlined, "--fn", "main", "--arg", "steps=2", "--dim", "n=3")
    assert code == 0 and ran_inlined == ran, err


def test_dump_bad_input(run_cli, tmp_path):
    code, _, err = run_cli("dump", CELL, "-o", tmp_path / "cell.txt")
    assert code != 0 and "must end in .svasm (text) or .svm (binary)" in err
    code, _, err = run_cli("dump", CELL, "--fn", "nosuch", "-o", tmp_path / "x.svasm")
    assert code != 0 and "nosuch" in err


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_run_dump_shows_the_jit_view(run_cli, tmp_path, level):
    out = tmp_path / f"after_{level}.svasm"
    code, _, err = run_cli("run", CELL, "--dim", "batch=2", "--dim", "seq=3,5", "--iters", "6", "--jit-level", level,
                           "--warmup", "0", "--hot-count", "1", "--hot-ms", "0", "--jit-wait", "--no-cache", "-q",
                           "--dump", out)
    assert code == 0, err
    text = out.read_text()
    notes = [line.strip() for line in text.splitlines() if line.strip().startswith("; jit:")]
    assert notes, text
    if level == "O1":
        assert any(re.match(r"; jit: kernel svm_\w+, guard f32\[[^\]]*\].*, launches \d+", n) for n in notes), notes
    else:
        assert any(re.match(r"; jit: region PC 0x[0-9A-F]{4}\.\.0x[0-9A-F]{4} kernel svm_\w+.*launches [1-9]", n)
                   for n in notes), notes
    # The rewritten tokens: the dynamic dims now carry the range the JIT compiled for.
    before = run_cli("dis", CELL)[1]
    assert re.search(r"\[\?\d+\s*\(?\w*\)?\s*\d+\.\.\d+", text) or text.count("..") > before.count(".."), text
    # It still assembles, to the module `dis` shows without the comments.
    code, _, err = run_cli("asm", out, "-o", tmp_path / "after.svm")
    assert code == 0, err
    assert code_lines(run_cli("dis", tmp_path / "after.svm")[1]) == code_lines(text)
