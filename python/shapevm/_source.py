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


# ---- a Module's parameter plan: derived parameters and a construct specialized to shapes ----
#
# Every `self.NAME` construct reads as a parameter, and every pure expression of parameters
# (casts, transposes, reshapes, arithmetic, names assigned once from such expressions at the top
# level), is hoisted out of construct: construct takes it as an extra parameter, annotated with
# its shape when the instance's parameters are known, and a separate `derive` program computes
# the non-trivial ones once per weight assignment (runtime.Module). Anything this analysis cannot
# prove leaves the expression in construct, which stays correct; the plain program is the fallback.

_PURE_OPS = {"cast", "reshape", "transpose", "squeeze", "unsqueeze", "contiguous"}
_PURE_METHODS = {"reshape", "view", "transpose", "squeeze", "unsqueeze", "contiguous"}
_PURE_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)
DERIVED_PREFIX = "_shapevm_p"


class ParameterPlan:
    """What Module needs to specialize construct. `items`: one per extra construct parameter, in
    order: ("attr", NAME) passes the attribute itself, ("derived", k) the k-th output of `derive`.
    `derive`: (source, filename, entry) or None; `params`: the attribute names both read."""

    def __init__(self, items, derive, construct, params, entry, filename):
        self.items = items
        self.derive = derive
        self._construct = construct  # (lines, insert line, insert col): where the annotated params go
        self.params = params
        self.entry = entry
        self.filename = filename

    def construct_source(self, shapes):
        """construct's text with its extra parameters annotated (None: a dim left open)."""
        lines, line, col = self._construct
        extra = "".join(f", {DERIVED_PREFIX}{k}: {_annotation(shape)}" for k, shape in enumerate(shapes))
        text = list(lines)
        raw = text[line - 1].encode()
        text[line - 1] = (raw[:col] + extra.encode() + raw[col:]).decode()
        return "".join(text)


def _annotation(shape):
    if shape is None or len(shape) == 0:
        return "Tensor"
    return "Tensor[" + ", ".join("None" if d is None else str(int(d)) for d in shape) + "]"


class _Classifier:
    """Which expressions of construct depend only on parameters (see the section comment)."""

    def __init__(self, methods, constants, module_constants):
        self.methods = methods
        self.constants = constants
        self.module_constants = module_constants  # less construct's own names (they shadow)
        self.derived_names = {}  # name -> (line, col) where its assignment ends: later reads only

    def is_param(self, node):
        return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" and
                isinstance(node.ctx, ast.Load) and node.attr not in self.methods and node.attr not in self.constants)

    def static(self, node):
        """A compile-time constant argument: literals, ops.NAME, module and class constants."""
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, (ast.Tuple, ast.List)):
            return all(self.static(e) for e in node.elts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self.static(node.operand)
        if isinstance(node, ast.Name):
            return node.id in self.module_constants
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return node.value.id in ("ops", "shapevm") or (node.value.id == "self" and node.attr in self.constants)
        return False

    def derived(self, node):
        """True when `node` is a tensor expression of parameters only (at least one)."""
        if self.is_param(node):
            return True
        if isinstance(node, ast.Name):
            defined = self.derived_names.get(node.id)
            return isinstance(node.ctx, ast.Load) and defined is not None and (node.lineno, node.col_offset) >= defined
        if isinstance(node, ast.Attribute):
            return node.attr == "T" and self.derived(node.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, _PURE_BINOPS):
            sides = (node.left, node.right)
            return any(self.derived(s) for s in sides) and all(self.derived(s) or self.static(s) for s in sides)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return self.derived(node.operand)
        if isinstance(node, ast.Call) and not node.keywords and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "ops":
                return (func.attr in _PURE_OPS and self.derived(node.args[0]) and
                        all(self.static(a) for a in node.args[1:]))
            if isinstance(func, ast.Attribute) and func.attr in _PURE_METHODS:
                return self.derived(func.value) and all(self.static(a) for a in node.args)
        if isinstance(node, ast.Call) and not node.keywords and not node.args:
            func = node.func
            return isinstance(func, ast.Attribute) and func.attr == "contiguous" and self.derived(func.value)
        return False


def _stores(fn_node):
    counts = {}
    for n in ast.walk(fn_node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            counts[n.id] = counts.get(n.id, 0) + 1
    return counts


def _segment(lines, node):
    """The source text of `node` (ast offsets are UTF-8 bytes)."""
    if node.lineno == node.end_lineno:
        return lines[node.lineno - 1].encode()[node.col_offset:node.end_col_offset].decode()
    parts = [lines[node.lineno - 1].encode()[node.col_offset:].decode()]
    parts += lines[node.lineno:node.end_lineno - 1]
    parts.append(lines[node.end_lineno - 1].encode()[:node.end_col_offset].decode())
    return "".join(parts)


def _whole_lines(lines, stmt):
    """True when `stmt` alone occupies its lines (nothing but a comment after it)."""
    first = lines[stmt.lineno - 1].encode()
    last = lines[stmt.end_lineno - 1].encode()
    rest = last[stmt.end_col_offset:].decode().strip()
    return first[:stmt.col_offset].strip() == b"" and (rest == "" or rest.startswith("#"))


def _maximal(classifier, node, out):
    """The maximal derived sub-expressions of `node`, in source order."""
    if isinstance(node, ast.expr) and classifier.derived(node):
        out.append(node)
        return
    for child in ast.iter_child_nodes(node):
        _maximal(classifier, child, out)


def parameter_plan(cls):
    """The ParameterPlan of a Module subclass, or None when construct reads no parameter or its
    signature cannot take more parameters (defaults, keyword-only, *args)."""
    owner = next(c for c in cls.__mro__ if "construct" in c.__dict__)
    construct = owner.__dict__["construct"]
    source, filename, entry = module_program(cls)
    _, lines, tree = _file(construct, entry)
    cls_node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == owner.__name__ and
                    any(_function_node(n, construct) is m for m in n.body))
    fn = _function_node(cls_node, construct)
    a = fn.args
    if a.defaults or a.kwonlyargs or a.posonlyargs or a.vararg or a.kwarg or not a.args:
        return None
    methods = {m.name for m in cls_node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    constants = {t.id for s in cls_node.body if isinstance(s, (ast.Assign, ast.AnnAssign))
                 for t in (s.targets if isinstance(s, ast.Assign) else [s.target]) if isinstance(t, ast.Name)}
    stores = _stores(fn)
    arguments = {p.arg for p in a.args}
    module_constants = {t.id for s in tree.body if isinstance(s, ast.Assign) for t in s.targets
                        if isinstance(t, ast.Name)} - set(stores) - arguments
    classifier = _Classifier(methods, constants, module_constants)

    # Top-level statements that only name derived values: moved to derive whole.
    moved = []
    for stmt in fn.body:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 or not _whole_lines(lines, stmt):
            continue
        target, value = stmt.targets[0], stmt.value
        if isinstance(target, ast.Name):
            pairs = [(target, value)]
        elif (isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts)
              and all(isinstance(t, ast.Name) for t in target.elts)):
            pairs = list(zip(target.elts, value.elts))
        else:
            continue
        if all(stores.get(t.id) == 1 and t.id not in arguments and classifier.derived(v) for t, v in pairs):
            classifier.derived_names.update((t.id, (stmt.end_lineno, stmt.end_col_offset)) for t, _ in pairs)
            moved.append(stmt)

    # The maximal derived expressions everywhere else: each becomes a parameter of construct.
    found = []
    for stmt in fn.body:
        if stmt not in moved:
            _maximal(classifier, stmt, found)
    if not found:
        return None
    keys, items, computed = {}, [], []
    replacements = []  # (node, parameter index)
    for node in found:
        key = ast.dump(node)
        if key not in keys:
            keys[key] = len(items)
            if classifier.is_param(node):
                items.append(("attr", node.attr))
            else:
                items.append(("derived", len(computed)))
                computed.append(node)
        replacements.append((node, keys[key]))

    # construct: moved statements blanked, derived expressions replaced (right to left on a line).
    text = list(source.splitlines(keepends=True))
    text += ["\n"] * (len(lines) + 2 - len(text))
    for stmt in moved:
        for n in range(stmt.lineno, stmt.end_lineno + 1):
            text[n - 1] = "\n"
    for node, k in sorted(replacements, key=lambda r: (r[0].lineno, r[0].col_offset), reverse=True):
        name = f"{DERIVED_PREFIX}{k}"
        first = text[node.lineno - 1].encode()
        last = text[node.end_lineno - 1].encode()
        if node.lineno == node.end_lineno:
            text[node.lineno - 1] = (first[:node.col_offset] + name.encode() + first[node.end_col_offset:]).decode()
            continue
        text[node.lineno - 1] = (first[:node.col_offset] + b"(" + name.encode() + b"\n").decode()
        for n in range(node.lineno + 1, node.end_lineno):
            text[n - 1] = "\n"
        text[node.end_lineno - 1] = (b")" + last[node.end_col_offset:]).decode()
    last_arg = a.args[-1]
    construct_text = (text, last_arg.end_lineno, last_arg.end_col_offset)

    derive = None
    if computed:
        derive = _derive_program(lines, tree, cls_node, fn, moved, computed, construct, filename, classifier)
    params = sorted({n.attr for n in ast.walk(fn) if classifier.is_param(n)})
    return ParameterPlan(items, derive, construct_text, params, entry, filename)


def _derive_program(lines, tree, cls_node, fn, moved, computed, construct, filename, classifier):
    """(source, filename, entry) of `Class.construct(self)` computing `computed` (a tuple): the
    moved statements at their own lines, each computed expression at its first line."""
    text = _Text(lines)
    indent = " " * cls_node.col_offset
    text.put(cls_node.lineno, f"{indent}class {cls_node.name}:")
    body_indent = " " * fn.body[0].col_offset
    text.put(fn.lineno, " " * fn.col_offset + "def construct(self):")
    for stmt in moved:
        text.copy(stmt.lineno, stmt.end_lineno)
    groups = {}  # first line -> [(name, text)]
    for k, node in enumerate(computed):
        groups.setdefault(node.lineno, []).append((f"_shapevm_d{k}", "(" + _segment(lines, node) + ")"))
    line = fn.lineno
    for first in sorted(groups):
        items = groups[first]
        targets = ", ".join(n for n, _ in items)
        statement = body_indent + targets + " = " + ", ".join(t for _, t in items)
        at = max(first, line + 1)
        while at <= len(text.out) and at in text.taken:
            at += 1
        for offset, part in enumerate(statement.split("\n")):
            if at + offset > len(text.out):
                text.out.append("")
            text.put(at + offset, part)
        line = at + statement.count("\n")
    at = line + 1
    while at <= len(text.out) and at in text.taken:
        at += 1
    if at > len(text.out):
        text.out += [""] * (at - len(text.out))
    names = ", ".join(f"_shapevm_d{k}" for k in range(len(computed)))
    text.put(at, body_indent + "return " + names)  # one value, or a tuple of them
    for stmt in cls_node.body:  # class constants
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            text.copy(stmt.lineno, stmt.end_lineno)
    used = set()
    for node in list(moved) + list(computed):
        used |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    _add_module_context(text, tree, used)
    return text.text(), filename, f"{cls_node.name}.construct"
