# SPDX-License-Identifier: Apache-2.0
# The source text @shapevm.jit and shapevm.Module hand to the frontend: the user's function (or
# class) and what it needs from its file — the same-file functions it calls, the module constants
# it reads, the shapevm imports — each copied to ITS ORIGINAL LINE of an otherwise blank text, so
# the frontend's line numbers are the user's. Decorators and base classes are dropped.
import ast
import inspect
import textwrap

from .errors import compile_error


def _where(obj):
    code = getattr(obj, "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code else (None, None)


def _file(obj, what):
    """(filename, lines of the whole file, its ast) for a function or class."""
    filename, line = _where(obj)
    try:
        lines, _ = inspect.findsource(obj)
        filename = inspect.getsourcefile(obj) or filename
    except (OSError, TypeError) as err:
        raise compile_error("Unsupported", f"{what}: its source is not available ({err}); ShapeVM compiles a "
                            "function from its source text, so define it in a .py file (not in the REPL or exec)",
                            line=line, file=filename) from None
    try:
        tree = ast.parse("".join(lines), filename)
    except SyntaxError as err:
        raise compile_error("ParseError", f"{what}: {filename} does not parse now ({err.msg}); was it edited "
                            "after the import?", line=err.lineno, file=filename) from None
    return filename, lines, tree


def _function_node(tree, fn):
    """The FunctionDef of `fn` in its file's tree (matched by name and first line)."""
    first = fn.__code__.co_firstlineno
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == fn.__name__:
            if min([node.lineno] + [d.lineno for d in node.decorator_list]) == first:
                return node
    return None


def _unwrap(obj):
    while hasattr(obj, "__wrapped__"):
        obj = obj.__wrapped__
    return obj


def check_function(fn, what):
    """CompileErrors for what is not a compilable function at all (before reading its source)."""
    filename, line = _where(fn)
    if not inspect.isfunction(fn):
        raise compile_error("Unsupported", f"{what}: only a Python function (def) can be compiled, got "
                            f"{type(fn).__name__}")
    if fn.__name__ == "<lambda>":
        raise compile_error("Unsupported", f"{what}: a lambda cannot be compiled (line {line}); define the function "
                            "with def", line=line, file=filename)
    code = fn.__code__
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        kind = "*args" if code.co_flags & inspect.CO_VARARGS else "**kwargs"
        raise compile_error("Unsupported", f"{what}: a function with {kind} cannot be compiled (line {line}); "
                            "ShapeVM functions take a fixed list of annotated parameters", line=line, file=filename)


class _Text:
    """A blank copy of a file that nodes are copied into, at their own lines."""

    def __init__(self, lines):
        self.source = lines
        self.out = [""] * len(lines)
        self.taken = set()

    def copy(self, first, last, dedent=False):
        if any(n in self.taken for n in range(first, last + 1)):
            return False
        block = self.source[first - 1:last]
        if dedent:
            block = textwrap.dedent("".join(block)).splitlines(keepends=True)
        for n, text in zip(range(first, last + 1), block):
            self.out[n - 1] = text if text.endswith("\n") else text + "\n"
            self.taken.add(n)
        return True

    def put(self, line, text):
        self.out[line - 1] = text + "\n"
        self.taken.add(line)

    def text(self):
        return "".join(line if line.strip() else "\n" for line in self.out)


def _names_loaded(node):
    """The free names a def reads: loaded names that are not its parameters or bound in its body
    (Python makes a name local to a function when the function assigns it anywhere)."""
    loaded = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = node.args
        bound |= {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}
        bound |= {p.arg for p in (a.vararg, a.kwarg) if p is not None}
    declared_global = {name for n in ast.walk(node) if isinstance(n, ast.Global) for name in n.names}
    return loaded - (bound - declared_global)


def _called_names(node):
    return {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def _add_function(text, node, top_level):
    """Copies a def without its decorators (a nested def is dedented to column 0)."""
    return text.copy(node.lineno, node.end_lineno, dedent=not top_level and node.col_offset > 0)


def _add_module_context(text, tree, used_names):
    """The shapevm imports and the module-level constants the copied code reads."""
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").split(".")[0] == "shapevm":
            text.copy(stmt.lineno, stmt.end_lineno)
        elif isinstance(stmt, ast.Import) and any(a.name.split(".")[0] == "shapevm" for a in stmt.names):
            kept = [a for a in stmt.names if a.name.split(".")[0] == "shapevm"]
            if len(kept) == len(stmt.names) or stmt.lineno != stmt.end_lineno:
                text.copy(stmt.lineno, stmt.end_lineno)
            else:  # `import numpy as np, shapevm`: only the shapevm part, at the same line
                names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in kept)
                text.put(stmt.lineno, " " * stmt.col_offset + "import " + names)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id in used_names for t in targets):
                text.copy(stmt.lineno, stmt.end_lineno)


def _callee_node(tree, filename, globals_, name):
    """The def a call by `name` reaches in this file: the module global's (a same-file function),
    or, for a name not bound yet (a function defined below a decorated one), the file's own
    top-level def of that name."""
    if name in globals_:
        target = _unwrap(globals_[name])
        if inspect.isfunction(target) and target.__code__.co_filename == filename:
            return _function_node(tree, target)
        return None
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _add_callees(text, tree, filename, globals_, roots, used_names):
    """Same-file functions called by name from `roots` (and from those, transitively)."""
    pending = list(roots)
    seen = set()
    while pending:
        node = pending.pop()
        used_names |= _names_loaded(node)
        for name in _called_names(node) - seen:
            seen.add(name)
            callee = _callee_node(tree, filename, globals_, name)
            if callee is not None and _add_function(text, callee, callee in tree.body):
                pending.append(callee)


def function_program(fn):
    """(source, filename, entry) for @shapevm.jit on `fn`."""
    what = f"@shapevm.jit {getattr(fn, '__qualname__', fn)!s}"
    check_function(fn, what)
    filename, lines, tree = _file(fn, what)
    node = _function_node(tree, fn)
    if node is None:
        raise compile_error("Unsupported", f"{what}: its definition was not found in {filename}",
                            line=fn.__code__.co_firstlineno, file=filename)
    text = _Text(lines)
    _add_function(text, node, node in tree.body)
    used = set()
    _add_callees(text, tree, filename, fn.__globals__, [node], used)
    _add_module_context(text, tree, used)
    return text.text(), filename, fn.__name__


def module_program(cls):
    """(source, filename, entry) for a shapevm.Module subclass: its class with `construct` and the
    methods construct calls through self, the class constants, and the module context."""
    owner = next(c for c in cls.__mro__ if "construct" in c.__dict__)
    what = f"{owner.__qualname__}.construct"
    construct = owner.__dict__["construct"]
    check_function(construct, what)
    filename, lines, tree = _file(construct, what)
    cls_node = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == owner.__name__ and
                     any(_function_node(n, construct) is m for m in n.body)), None)
    if cls_node is None:
        raise compile_error("Unsupported", f"{what}: the class was not found in {filename}", file=filename)
    methods = {m.name: m for m in cls_node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    text = _Text(lines)
    indent = " " * cls_node.col_offset
    text.put(cls_node.lineno, f"{indent}class {cls_node.name}:")
    # construct and what it calls as self.NAME(...), transitively
    chosen, pending = [], ["construct"]
    while pending:
        name = pending.pop()
        if name in (m.name for m in chosen) or name not in methods:
            continue
        chosen.append(methods[name])
        pending += [c.func.attr for c in ast.walk(methods[name]) if isinstance(c, ast.Call) and
                    isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name) and
                    c.func.value.id == "self"]
    for method in chosen:
        text.copy(method.lineno, method.end_lineno)
    attrs = {n.attr for m in chosen for n in ast.walk(m) if isinstance(n, ast.Attribute) and
             isinstance(n.value, ast.Name) and n.value.id == "self"}
    for stmt in cls_node.body:  # class constants read as self.NAME
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id in attrs for t in targets):
                text.copy(stmt.lineno, stmt.end_lineno)
    used = set()
    _add_callees(text, tree, filename, construct.__globals__, chosen, used)
    _add_module_context(text, tree, used)
    return text.text(), filename, f"{cls_node.name}.construct"
