# SPDX-License-Identifier: Apache-2.0
# Issue 24 through the CLI: deep nesting, deep recursion and endless loops end in a clean
# LimitExceeded (never a signal or a hang) in run, compile and dis; silent acceptance is gone
# (--arg for a tensor parameter, a negative --seed); the messages for an empty module and a
# directory say what they are; a UTF-8 byte-order mark is accepted.
import pytest

from svasm_harness import assert_clean_failure, run_cli

DEEP = 100000


@pytest.fixture
def cli(shapevm_bin):
    def call(*args, env=None, timeout=120):
        return run_cli(shapevm_bin, *args, timeout=timeout, env=env)
    return call


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("expr", ["(" * DEEP + "x" + ")" * DEEP, "[" * DEEP + "x" + "]" * DEEP,
                                  "-" * DEEP + "x", "x" + " ** x" * DEEP, "x" + " + x" * DEEP],
                         ids=["parens", "brackets", "unary", "power", "chain"])
def test_deep_nesting_is_an_error_in_every_subcommand(cli, tmp_path, expr):
    prog = write(tmp_path, "deep.py", f"def f(x: int):\n    y = {expr}\n    return y\n")
    for args in (["run", prog, "--arg", "x=1"], ["compile", prog, "-o", tmp_path / "deep.svm"], ["dis", prog]):
        code, out, err = cli(*args)
        assert_clean_failure(code, out, err, "LimitExceeded", "nested too deeply", "line 2")


def test_deep_recursion_is_an_error_not_a_crash(cli, tmp_path):
    prog = write(tmp_path, "rec.py", "def down(n: int) -> int:\n    if n == 0:\n        return 0\n"
                                     "    return down(n - 1) + 1\n")
    code, out, err = cli("run", prog, "--arg", "n=99999", "--set", "max_call_depth=100000")
    assert_clean_failure(code, out, err, "LimitExceeded", "native stack")
    code, out, err = cli("run", prog, "--arg", "n=5000")
    assert_clean_failure(code, out, err, "LimitExceeded", "call depth 200", "more calls")
    assert max(len(line) for line in err.splitlines()) < 2000, err


def test_endless_loops_end_by_default(cli, tmp_path):
    prog = write(tmp_path, "spin.py", "def spin(n: int) -> int:\n    while True:\n        n = n + 1\n    return n\n")
    code, out, err = cli("run", prog, "--arg", "n=0", "--set", "max_steps=200000", timeout=60)
    assert_clean_failure(code, out, err, "LimitExceeded", "max_steps", "in function 'spin' at PC", "line 2")
    spin = write(tmp_path, "spin.svasm", '.module "spin"\n.func spin\n  .outputs 0\nloop:\n  Jump @loop\n.end\n')
    code, out, err = cli("run", spin, "--set", "max_steps=200000", timeout=60)
    assert_clean_failure(code, out, err, "LimitExceeded", "max_steps")


def test_arg_for_a_tensor_parameter_is_an_error(cli, tmp_path):
    prog = write(tmp_path, "t.py", "def f(x: Tensor[2, 3]):\n    return x * 2.0\n")
    code, out, err = cli("run", prog, "--arg", "x=1")
    assert_clean_failure(code, out, err, "--arg x=", "is a tensor", "--input x=")


def test_negative_seed_is_rejected(cli, tmp_path):
    prog = write(tmp_path, "t.py", "def f(x: Tensor[2, 3]):\n    return x * 2.0\n")
    code, out, err = cli("run", prog, "--seed", "-1")
    assert_clean_failure(code, out, err, "seed", "unsigned")
    code, out, err = cli("run", prog, "--seed", "18446744073709551615", "--quiet")
    assert code == 0, err


def test_empty_module_and_directory_messages(cli, tmp_path):
    empty = write(tmp_path, "empty.svasm", '.module "empty"\n')
    code, out, err = cli("run", empty)
    if code != 0:  # an empty module may also be refused when loading; either way it says so
        assert "several functions ()" not in err
        assert_clean_failure(code, out, err, "no functions")
    folder = tmp_path / "prog.py"
    folder.mkdir()
    code, out, err = cli("run", folder)
    assert_clean_failure(code, out, err, "is a directory")
    code, out, err = cli("run", tmp_path)
    assert_clean_failure(code, out, err, "is a directory")


def test_byte_order_mark_is_accepted(cli, tmp_path):
    prog = tmp_path / "bom.py"
    prog.write_bytes(b"\xef\xbb\xbfdef f(x: int) -> int:\n    return x + 1\n")
    code, out, err = cli("run", prog, "--arg", "x=41")
    assert code == 0, err
    assert "42" in out


def test_unsupported_decorator_is_rejected(cli, tmp_path):
    prog = write(tmp_path, "dec.py", "class C:\n    @staticmethod\n    def f(x: int) -> int:\n        return x\n")
    code, out, err = cli("run", prog, "--arg", "x=1")
    assert_clean_failure(code, out, err, "@staticmethod", "not supported", "line 2")
