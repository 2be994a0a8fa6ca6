# SPDX-License-Identifier: Apache-2.0
# `shapevm debug`: golden transcripts of sessions piped through stdin (breakpoints by line, PC and
# function; step, next and finish across a user-function call and a loop; the frame view at O0
# and inside a compiled region at O2; a breakpoint on a line optimization removed; bad input), and
# the same kind of session through a real terminal (tmux), where readline edits and recalls lines.
# Goldens live in tests/python/debug/*.golden; SHAPEVM_UPDATE_GOLDEN=1 rewrites them (review the diff).
import os
import re
import shutil
import subprocess
import time
import uuid

import pytest

from conftest import ROOT

HERE = ROOT / "tests" / "python" / "debug"
PROGRAM = "tests/python/debug/loop_call.py"
CELL = "examples/lstm_cell.py"


def normalize(text):
    """Run-to-run noise out: kernel symbol version ids and launch/run counters."""
    text = re.sub(r"(svm_[A-Za-z0-9_]+?)_v\d+", r"\1_vN", text)
    text = re.sub(r"(launches|runs|calls|compiled|declines|guard misses) \d+", r"\1 N", text)
    return text


def session(shapevm_bin, commands, *flags):
    proc = subprocess.run([shapevm_bin, "debug", *flags], input="".join(c + "\n" for c in commands),
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    return proc.returncode, proc.stdout, proc.stderr


def check_golden(name, text):
    path = HERE / f"{name}.golden"
    text = normalize(text)
    if os.environ.get("SHAPEVM_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"{path} missing (run with SHAPEVM_UPDATE_GOLDEN=1 and review it)"
    assert text == path.read_text(), f"transcript differs from {path.name}:\n{text}"


def test_breakpoints_by_line_pc_and_function_with_step_next_finish(shapevm_bin):
    code, out, err = session(shapevm_bin, [
        "break 17",            # inside the loop
        "break scale",         # a function
        "break PC=0x0002",     # a PC of the entry function
        "info breakpoints",
        "run",
        "bt",
        "continue",            # into scale (its first instruction)
        "bt",
        "next",
        "next",
        "finish",              # back in main after the call
        "step",
        "step",
        "delete 2",
        "continue",            # the loop body
        "frame",
        "print acc",
        "print y",
        "next",                # the loop header
        "next",
        "list",
        "delete 1",
        "continue",
        "quit",
    ], PROGRAM, "--fn", "main", "--arg", "steps=2", "--dim", "n=3", "--jit-level", "O0")
    assert code == 0, err
    check_golden("line_pc_function", out)


def test_frame_view_at_o0_and_bad_input(shapevm_bin):
    code, out, err = session(shapevm_bin, [
        "break 4",             # no code: an import line
        "break 99",            # beyond every function
        "break nosuchfunction",
        "frame",               # not running yet
        "frobnicate",          # unknown command
        "break 15",
        "run",
        "info registers",
        "print r99",           # unknown register
        "print gh",            # not live yet
        "print rows",
        "info jit",
        "quit",
    ], CELL, "--dim", "batch=2", "--dim", "seq=3", "--jit-level", "O0")
    assert code == 0, err
    check_golden("frame_o0", out)


def test_removed_line_breakpoint(shapevm_bin):
    code, out, err = session(shapevm_bin, [
        "break 13",            # `unused = x * 3.0`: dead-code elimination removed it
        "run",
        "frame",
        "quit",
    ], PROGRAM, "--fn", "main", "--arg", "steps=1", "--dim", "n=2", "--jit-level", "O0")
    assert code == 0, err
    check_golden("removed_line", out)
    # Without optimizations the line has code, and the breakpoint stops on it.
    code, out, _ = session(shapevm_bin, ["break 13", "run", "quit"], PROGRAM, "--fn", "main", "--arg", "steps=1",
                           "--dim", "n=2", "--jit-level", "O0", "--no-opt")
    assert "Breakpoint 1, main PC" in out and "13\tunused = x * 3.0" in out


def test_post_mortem_stop_and_restart(shapevm_bin):
    # The matmul in project() fails (3 vs 4 contracting dims): the debugger stops in that frame
    # before it unwinds, the registers that led to it can be read, the program cannot go on, and
    # `run` starts it again with the breakpoints kept. `quit` there still reports the error.
    code, out, err = session(shapevm_bin, [
        "break 9",
        "run",
        "continue",            # to the error, in project()
        "bt",
        "frame",
        "print z",
        "continue",            # refused: it cannot go on
        "run",                 # again from the start: the breakpoint stops first
        "print x",
        "continue",
        "quit",
    ], "tests/python/debug/fails.py", "--fn", "f", "--dim", "n=2", "--jit-level", "O0")
    assert code != 0 and "matmul contracting dims differ" in err, (code, err)
    check_golden("post_mortem", out)
    assert out.count("Breakpoint 1, f PC") == 2 and out.count("Program stopped with an error") == 2
    # After a normal end, `run` runs the program again (its outputs are printed twice).
    code, out, err = session(shapevm_bin, ["run", "run", "quit"], PROGRAM, "--fn", "main", "--arg", "steps=1",
                             "--dim", "n=2", "--jit-level", "O0")
    assert code == 0, err
    assert out.count("[program exited normally]") == 2 and out.count("out0:") == 2 and "[restarting the program]" in out


def test_frame_inside_a_compiled_region_at_o2(shapevm_bin, tmp_path):
    # Run 1 is interpreted and makes the region hot; the JIT installs the fused region before run 2
    # (--jit-wait). The breakpoint inside it makes it decline: run 2 stops there, interpreted.
    flags = [CELL, "--dim", "batch=2", "--dim", "seq=3", "--jit-level", "O2", "--warmup", "0", "--hot-count", "1",
             "--hot-ms", "0", "--jit-wait", "--iters", "2", "--no-cache", "--seed", "3"]
    code, out, err = session(shapevm_bin, ["break 21", "run", "continue", "frame", "info jit", "print g",
                                           "delete 1", "continue"], *flags)
    assert code == 0, err
    check_golden("frame_o2_region", out)
    # Results never change: the same runs without the debugger (the region compiled) print the same
    # outputs, up to the float rounding compiled kernels may differ in.
    plain = subprocess.run([shapevm_bin, "run", *flags], capture_output=True, text=True, timeout=120, cwd=ROOT)

    def summaries(text):
        return [[float(v) for v in re.findall(r"=(-?[\d.e+-]+)", line)] for line in text.splitlines() if line.startswith("out")]

    expected, got = summaries(plain.stdout), summaries(out)
    assert len(expected) == 2 and len(got) == 2, (plain.stdout, out)
    for want, have in zip(expected, got):
        assert have == pytest.approx(want, rel=1e-4, abs=1e-6)


def test_debug_in_a_terminal_with_line_editing(shapevm_bin):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    name = "svmdb-" + uuid.uuid4().hex[:8]
    command = (f"{shapevm_bin} debug {PROGRAM} --fn main --arg steps=2 --dim n=3 --jit-level O0; "
               "echo SESSION-ENDED; sleep 30")
    start = subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "50", "-c", str(ROOT), command],
                           capture_output=True, text=True)
    if start.returncode != 0:
        pytest.skip(f"tmux cannot start a session here: {start.stderr.strip()}")

    def keys(*args):
        subprocess.run(["tmux", "send-keys", "-t", name, *args], check=True)

    def screen():
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", name, "-S", "-200"], capture_output=True,
                              text=True).stdout

    def wait_for(text, count=1):
        deadline = time.time() + 60
        while time.time() < deadline:
            if screen().count(text) >= count:
                return
            time.sleep(0.1)
        raise AssertionError(f"'{text}' did not appear {count}x:\n{screen()}")

    try:
        wait_for("(svmdb)")
        keys("break 17", "Enter")
        wait_for("Breakpoint 1 at main")
        keys("run", "Enter")
        wait_for("Breakpoint 1, main")
        keys("print acc", "Enter")
        wait_for("acc = tensor shape [3,4]")
        keys("Up", "Enter")  # history: the previous command again
        wait_for("acc = tensor shape [3,4]", 2)
        keys("prnt acc", "Home", "Right", "Right", "i", "Enter")  # editing inside the line: `prnt` -> `print`
        wait_for("acc = tensor shape [3,4]", 3)
        keys("quit", "Enter")
        wait_for("SESSION-ENDED")
        assert "error" not in screen().split("SESSION-ENDED")[0].lower()
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
