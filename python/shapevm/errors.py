# SPDX-License-Identifier: Apache-2.0
# ShapeVM's errors as Python exceptions, derived from THE error table (include/shapevm/errors.def,
# read through the extension): one class per code under `Error`, named by one rule
# (`XMismatch` -> `XError`, else the code's name), plus `CompileError` for every failure while
# compiling or loading a program (those exceptions also derive from their code's class).
import re

from . import _core

# What ShapeVM's messages say about where: the VM's run-time context (vm/interpreter.cc
# VirtualMachine::where) and the frontend's compile-time position (frontend/lexer.cc).
# Code inlined into a caller (frontend/inline.cc) names the function the user wrote, then
# ", inlined into 'caller'"; the PC is the caller's.
_RUN_CONTEXT = re.compile(r"in function '(?P<function>[^']+)' at PC 0x(?P<pc>[0-9A-Fa-f]+)"
                          r"(?: \((?:(?P<file>.*?) )?line (?P<line>\d+):(?P<col>\d+)\))?"
                          r"(?:, inlined into '(?P<caller>[^']+)')?")
_COMPILE_POSITION = re.compile(r"\(line (?P<line>\d+), col (?P<col>\d+)\)")
_COMPILE_FUNCTION = re.compile(r"(?:in|function) '(?P<function>[\w.]+)'")
_COMPILE_FILE = re.compile(r"^(?P<file>[^\n]+?\.(?:py|svasm|svm)): ")  # frontend.cc / module_io.cc prefix


class Error(Exception):
    """A ShapeVM error. `.code` is the error table's name ("ShapeMismatch"), `.function`, `.pc`,
    `.line` and `.col` say where (None when the message does not say), `.file` the source file.
    In code the frontend inlined, `.function` is the function the user wrote and `.inlined_into`
    the function whose bytecode ran it (`.pc` is that function's); otherwise `.inlined_into` is None."""

    code = None

    def __init__(self, message, code=None, *, function=None, pc=None, line=None, col=None, file=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.function, self.pc, self.line, self.col, self.file = function, pc, line, col, file
        self.inlined_into = None
        run = _RUN_CONTEXT.search(message)
        if run:
            self.function = self.function or run.group("function")
            self.inlined_into = run.group("caller")
            self.pc = self.pc if self.pc is not None else int(run.group("pc"), 16)
            if run.group("line"):
                self.line = self.line or int(run.group("line"))
                self.col = self.col or int(run.group("col"))
                self.file = self.file or run.group("file")
            return
        named_file = _COMPILE_FILE.match(message)
        if named_file:
            self.file = self.file or named_file.group("file")
        position = _COMPILE_POSITION.search(message)
        if position:
            self.line = self.line or int(position.group("line"))
            self.col = self.col or int(position.group("col"))
        named = _COMPILE_FUNCTION.search(message)
        if named:
            self.function = self.function or named.group("function")

    def __str__(self):
        return self.message


class CompileError(Error):
    """A program could not be compiled or loaded (raised by @shapevm.jit at decoration time, by a
    Module class definition and by shapevm.load). Also an instance of the code's class."""


Error.__module__ = CompileError.__module__ = "shapevm"  # as users name them


def class_name(code):
    """The Python class name of an error table code."""
    return code[: -len("Mismatch")] + "Error" if code.endswith("Mismatch") else code


ERROR_TABLE = _core.error_table()  # [(code, meaning)], index = ErrorCode
BY_CODE = {}  # code -> class (run time)
COMPILE_BY_CODE = {}  # code -> CompileError subclass that is also the code's class
for _code, _meaning in ERROR_TABLE:
    if _code == "Ok":
        BY_CODE[_code] = COMPILE_BY_CODE[_code] = Error
        continue
    _cls = type(class_name(_code), (Error,), {"code": _code, "__doc__": _meaning, "__module__": "shapevm"})
    BY_CODE[_code] = _cls
    COMPILE_BY_CODE[_code] = type("CompileError", (CompileError, _cls),
                                  {"code": _code, "__doc__": _meaning, "__module__": "shapevm",
                                   "__qualname__": f"CompileError[{class_name(_code)}]"})
CLASSES = {cls.__name__: cls for code, cls in BY_CODE.items() if code != "Ok"}

_core._set_error_classes([BY_CODE[c] for c, _ in ERROR_TABLE], [COMPILE_BY_CODE[c] for c, _ in ERROR_TABLE])


def compile_error(code, message, **where):
    """A CompileError raised by the package itself (before the frontend saw the source)."""
    return COMPILE_BY_CODE[code](message, code, **where)
