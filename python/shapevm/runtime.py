# SPDX-License-Identifier: Apache-2.0
# The runtime half of the `shapevm` package (docs/python.md): @jit, Module, load, set_context /
# get_context and the JIT's log lines on Python's logging. Every compiled thing is a
# _core.Program (one Session); live Programs are tracked weakly so set_context(jit_level=...)
# reaches those without a level of their own, and interpreter exit closes them all first.
import atexit
import functools
import inspect
import logging
import threading
import weakref

import numpy as np

from . import _core, _source
from .errors import Error, compile_error

_PROGRAMS = weakref.WeakSet()  # every live program (closed at exit)
_FOLLOWING = weakref.WeakSet()  # ... of which those without their own jit_level (set_context reaches them)
_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)  # support/logging.h LogLevel


def _new_program(jit_level=None, wait=False):
    program = _core.Program(jit_level=None if jit_level is None else _level_text(jit_level), jit_wait=wait)
    _PROGRAMS.add(program)
    if jit_level is None:
        _FOLLOWING.add(program)
    return program


def _timeout_ms(timeout):
    """warm_start's timeout (seconds, None = no limit) in ms; a limit rounds to at least 1 ms."""
    if timeout is None:
        return 0
    if not timeout >= 0:
        raise ValueError(f"warm_start: timeout must be >= 0 seconds, got {timeout!r}")
    return max(1, int(round(timeout * 1000)))


def _warm_start(program, timeout=None):
    """Session::warmStart: before the first call, installs (on this thread, each validated) every
    kernel and fused region the kernel cache's install records list for `program`. Returns a dict:
    installed, declined, failed, skipped, codegens, timed_out, cancelled, wall_ms, cpu_ms, note,
    summary and entries (one dict per site or region: function, kind, pc, outcome, reason,
    codegens). A cold or missing cache is a no-op with a note, never an error."""
    return program.warm_start(_timeout_ms(timeout))


def _level_text(level):
    return f"O{level}" if isinstance(level, int) and not isinstance(level, bool) else str(level)


# ---- settings ----

def set_context(**settings):
    """Sets tunables by name (`shapevm tunables` lists them): jit_level="O2", hot_count=0,
    jit_log=True, kernel_threads=4, ... jit_level also re-attaches the JIT of every live program
    that was not given its own jit_level; every other row is process-wide and read live.
    trace="OUT.json" starts the timeline (docs/observability.md; the file is opened now and
    written by set_context(trace=None) or at exit); trace_ops=True adds one event per op."""
    trace_ops = bool(settings.pop("trace_ops", False))
    if "trace" in settings:
        path = settings.pop("trace")
        _core.stop_trace()
        if path:
            _core.start_trace(str(path), trace_ops)
    elif trace_ops:
        raise ValueError("set_context(trace_ops=True) needs trace='OUT.json'")
    for key, value in settings.items():
        if key == "jit_level":
            text = _level_text(value)
            _core.set_tunable(key, text)
            for program in list(_FOLLOWING):
                if not program.closed:
                    program.set(key, text)
            continue
        if isinstance(value, bool):
            value = int(value)
        _core.set_tunable(key, str(value))


def get_context():
    """Every tunable by key with its current value (jit_level: the level new programs start at)."""
    return {row["key"]: row["value"] for row in _core.settings()}


# ---- @jit ----

JitFunction = _core.Function  # what @jit returns: call it with numpy arrays and Python scalars
# A ShapeVM-owned, read-only tensor of any dtype: shapevm.Parameter(array, dtype="bfloat16") holds
# a weight in bfloat16 (numpy has no such dtype); it crosses into calls as that tensor, never copied.
Parameter = _core.Parameter


def _compile_function(fn, jit_level, wait, warm_start=False):
    source, filename, entry = _source.function_program(fn)
    program = _new_program(jit_level, wait)
    try:
        program.load_source(source, filename, entry)
    except Error as err:
        err.function = err.function or fn.__qualname__
        raise
    compiled = _core.Function(program, program.index(entry), -1)
    compiled._program = program  # keeps the Python wrapper (tracked weakly in _PROGRAMS) alive
    functools.update_wrapper(compiled, fn)
    compiled.source = source  # the text the frontend compiled (the user's lines, the rest blank)
    if warm_start:
        compiled.warm_start_result = _warm_start(program)
    return compiled


def jit(fn=None, *, jit_level=None, wait=False, warm_start=False):
    """Compiles `fn` with ShapeVM's frontend now (errors raise CompileError here). `jit_level`
    overrides the context's for this function; `wait=True` makes each call wait for the compiles
    it triggered (reproducible tier-up). `warm_start=True` installs what the kernel cache lists
    for it now, before the first call (its result: `fn.warm_start_result`; or call
    `fn.warm_start(timeout=None)` later, before the first call)."""
    if fn is None:
        return lambda f: _compile_function(f, jit_level, wait, warm_start)
    return _compile_function(fn, jit_level, wait, warm_start)


# ---- Module ----

_MODULE_LOG = logging.getLogger("shapevm.module")
_DERIVE_LOCK = threading.Lock()
_MAX_SPECIALIZATIONS = 4  # construct programs an instance keeps, one per set of parameter shapes


def _probe(source, filename, entry):
    probe = _core.Program(jit_level="O0")
    try:
        probe.load_source(source, filename, entry)
    finally:
        probe.close()


def _parameter_plan(cls):
    """_source.parameter_plan, checked by compiling both programs now; None when there is nothing
    to hoist or the rewrite does not compile (the plain program then serves every call)."""
    try:
        plan = _source.parameter_plan(cls)
        if plan is not None:
            _probe(plan.construct_source([None] * len(plan.items)), plan.filename, plan.entry)
            if plan.derive is not None:
                _probe(*plan.derive)
        return plan
    except (Error, SyntaxError, ValueError, StopIteration) as err:
        _MODULE_LOG.debug("%s: parameters are read at every call (%s)", cls.__qualname__, err)
        return None


def _derive_function(plan):
    """The plan's derive program (one per class, at O0: it runs once per weight assignment)."""
    fn = plan.__dict__.get("derive_fn")
    if fn is None:
        with _DERIVE_LOCK:
            fn = plan.__dict__.get("derive_fn")
            if fn is None:
                source, filename, entry = plan.derive
                program = _new_program("O0")
                program.load_source(source, filename, entry)
                fn = _core.Function(program, program.index(entry), 0, (), True)  # raw: stays ShapeVM's
                fn._program = program
                plan.derive_fn = fn
    return fn


class Module:
    """An nn.Module-like class: subclass it, keep parameters as numpy array attributes and write
    `construct(self, ...)` in the ShapeVM subset. The class is compiled when it is defined; each
    instance gets its own program at its first call, specialized to its parameters' shapes, and
    pure expressions of parameters (casts, transposes, ...) are computed once per assignment
    (derived parameters, docs/python.md). numpy attributes are parameters the Module owns (a
    read-only copy; see __setattr__)."""

    _shapevm_plan = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        construct = getattr(cls, "construct", None)
        if construct is None:
            return
        source, filename, entry = _source.module_program(cls)
        _probe(source, filename, entry)  # compile errors surface at class definition
        signature = inspect.signature(construct)
        cls._shapevm_program_source = (source, filename, entry, len(signature.parameters) - 1)
        cls._shapevm_plan = _parameter_plan(cls)

    def __init__(self, *, jit_level=None, wait=False):
        """`jit_level` overrides the context's for this instance; `wait=True` makes each call wait
        for the compiles it triggered. Subclasses that skip super().__init__() get the defaults."""
        self.__dict__["_shapevm_options"] = (jit_level, wait)

    def _shapevm_function(self):
        fn = self.__dict__.get("_shapevm_fn")
        if fn is None:
            spec = getattr(type(self), "_shapevm_program_source", None)
            if spec is None:
                raise compile_error("Unsupported", f"{type(self).__qualname__} has no construct(self, ...) method")
            source, filename, entry, user_params = spec
            program = _new_program(*self.__dict__.get("_shapevm_options", (None, False)))
            program.load_source(source, filename, entry)
            fn = _core.Function(program, program.index(entry), user_params)
            fn._program = program  # keeps the Python wrapper (tracked weakly in _PROGRAMS) alive
            self.__dict__["_shapevm_fn"] = fn
        return fn

    def __setattr__(self, name, value):
        """Parameters are owned by the Module: a numpy array assigned to an attribute is copied
        once into ShapeVM's storage and the attribute holds a read-only array over that copy, so
        the JIT may keep what it derives from it (packed weights) across calls. Change a weight
        by assigning a new array (in-place writes raise numpy's read-only ValueError); the next
        call recomputes the derived parameters (and recompiles if a shape changed)."""
        object.__setattr__(self, name, _core._own_parameter(value))
        self._shapevm_assigned(name)

    def __delattr__(self, name):
        object.__delattr__(self, name)
        self._shapevm_assigned(name)

    def _shapevm_assigned(self, name):
        plan = type(self)._shapevm_plan
        if plan is not None and name in plan.params:
            state = self.__dict__
            state["_shapevm_generation"] = state.get("_shapevm_generation", 0) + 1

    def _shapevm_current(self):
        """The Function for this call: construct specialized to the parameters as they are now
        (their derived values bound), rebuilt after an assignment; the plain one when the class
        has no plan or specializing failed (that call then raises as it always did)."""
        state = self.__dict__
        current = state.get("_shapevm_state")
        if current is not None and current[0] == state.get("_shapevm_generation", 0):
            return current[1]
        lock = state.get("_shapevm_lock") or state.setdefault("_shapevm_lock", threading.Lock())
        with lock:
            current = state.get("_shapevm_state")
            generation = state.get("_shapevm_generation", 0)  # read before the attributes are
            if current is None or current[0] != generation:
                current = (generation, self._shapevm_specialize())
                state["_shapevm_state"] = current
        return current[1]

    def _shapevm_specialize(self):
        plan = type(self)._shapevm_plan
        if plan is None:
            return self._shapevm_function()
        state = self.__dict__
        try:
            derived = ()
            if plan.derive is not None:
                derived = _derive_function(plan).call_bound(self)
                if not isinstance(derived, tuple):
                    derived = (derived,)
                state["_shapevm_derive_runs"] = state.get("_shapevm_derive_runs", 0) + 1
            values = [getattr(self, what) if kind == "attr" else derived[what] for kind, what in plan.items]
            if not all(isinstance(v, (np.ndarray, _core.Parameter)) for v in values):
                raise TypeError("a parameter is neither a numpy array nor a shapevm.Parameter")
            shapes = tuple(tuple(v.shape) for v in values)
            programs = state.setdefault("_shapevm_programs", {})
            entry = programs.pop(shapes, None)
            if entry is None:
                program = _new_program(*state.get("_shapevm_options", (None, False)))
                program.load_source(plan.construct_source(shapes), plan.filename, plan.entry)
                entry = (program, program.index(plan.entry))
                while len(programs) >= _MAX_SPECIALIZATIONS:
                    programs.pop(next(iter(programs)))  # the least recently specialized
            programs[shapes] = entry
            user_params = type(self)._shapevm_program_source[3]
            fn = _core.Function(entry[0], entry[1], user_params, values)
            fn._program = entry[0]
            return fn
        except (Error, AttributeError, TypeError, IndexError) as err:
            _MODULE_LOG.debug("%s: parameters are read at every call (%s)", type(self).__qualname__, err)
            return self._shapevm_function()

    def __call__(self, *args, **kwargs):
        return self._shapevm_current().call_bound(self, *args, **kwargs)

    def stats(self):
        """Counters of this instance's program (runs, launches_compiled, kernels_installed, ...)
        and, under "module", its parameters: `specialized` (construct takes the parameters'
        shapes and its derived parameters bound), `derive_runs` (times the derived parameters
        were computed: once per assignment), `derived` (how many), `programs` (one per shape set)."""
        fn = self._shapevm_current()
        stats = fn.program.stats()
        plan = type(self)._shapevm_plan
        state = self.__dict__
        stats["module"] = {
            "specialized": fn is not state.get("_shapevm_fn"),
            "derive_runs": state.get("_shapevm_derive_runs", 0),
            "derived": 0 if plan is None else sum(kind == "derived" for kind, _ in plan.items),
            "programs": len(state.get("_shapevm_programs", {})),
        }
        return stats

    def wait_idle(self):
        self._shapevm_current().program.wait_idle()

    def warm_start(self, timeout=None):
        """Before this instance's first call: installs what the kernel cache lists for its program
        (shapevm.load's warm_start says more). Returns the result dict."""
        return _warm_start(self._shapevm_current().program, timeout)


# ---- load ----

class LoadedModule:
    """A program file loaded with shapevm.load: its functions are attributes (`mod.f(a, b)`),
    methods also by their bare name when unique; `mod["Cell.construct"]` by full name."""

    def __init__(self, path, jit_level=None, wait=False, warm_start=False):
        self.path = str(path)
        self.warm_start_result = None
        self.program = _new_program(jit_level, wait)
        self.program.load(self.path)
        self._functions = {}
        infos = self.program.functions()
        short = {}
        for info in infos:
            short.setdefault(info["name"].rsplit(".", 1)[-1], []).append(info["name"])
        for info in infos:
            fn = _core.Function(self.program, info["index"], -1)
            fn._program = self.program  # a function outliving this object keeps the program tracked
            self._functions[info["name"]] = fn
            bare = info["name"].rsplit(".", 1)[-1]
            if len(short[bare]) == 1:
                self._functions.setdefault(bare, fn)
        self.functions = [info["name"] for info in infos]
        if warm_start:
            self.warm_start()

    def __getattr__(self, name):
        functions = self.__dict__.get("_functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(f"{self.path} has no function {name!r} (functions: {', '.join(self.functions)})")

    def __getitem__(self, name):
        return self._functions[name]

    def stats(self):
        return self.program.stats()

    def warm_start(self, timeout=None):
        """Before the first call: installs, on this thread and each validated, every kernel and
        fused region the kernel cache's install records list for this program (what an earlier
        process or an imported `cache export` archive compiled), so the first call runs compiled.
        `timeout` (seconds) leaves what is not done by then to the usual tier-up. Returns (and
        keeps as `warm_start_result`) a dict: installed, declined, failed, skipped, codegens,
        timed_out, cancelled, wall_ms, cpu_ms, note, summary, entries."""
        self.warm_start_result = _warm_start(self.program, timeout)
        return self.warm_start_result


class OnnxModel(LoadedModule):
    """An imported ONNX model (docs/onnx.md): `run(**inputs)` or a call takes the graph's inputs by
    name (positionally too, in graph order) and returns its outputs in graph order (one array, or
    a tuple of them)."""

    def run(self, **inputs):
        return self._functions["main"](**inputs)

    def __call__(self, *args, **inputs):
        return self._functions["main"](*args, **inputs)


def load(path, *, jit_level=None, wait=False, warm_start=False):
    """Loads a .py, .svasm or .svm program (its functions are attributes) or an .onnx model (an
    OnnxModel: call it or run(**inputs)). `warm_start=True` runs `warm_start()` before returning:
    what the kernel cache lists for the program is installed before the first call."""
    if str(path).endswith(".onnx"):
        return OnnxModel(path, jit_level, wait, warm_start)
    return LoadedModule(path, jit_level, wait, warm_start)


# ---- the kernel cache as an archive (docs/scale-out.md) ----

def export_cache(directory, cache_dir=None):
    """Writes the compiled kernels and tuning records of the cache directory `cache_dir` (default:
    $SHAPEVM_CACHE_DIR, else ~/.cache/shapevm) to `directory` (kernels/, tuning.jsonl), as
    `shapevm cache export` does: an archive replicas and Dask workers import to start warm.
    Returns {"kernels": n, "tuning_records": m}."""
    return _core.cache_export(str(directory), "" if cache_dir is None else str(cache_dir))


def import_cache(directory, cache_dir=None):
    """Copies an exported archive into the cache directory `cache_dir` (default as export_cache);
    only entries that pass their checks are copied. Returns {"kernels": n, "tuning_records": m}."""
    return _core.cache_import(str(directory), "" if cache_dir is None else str(cache_dir))


# ---- logging and exit ----

def _log_lines(lines):
    for level, component, message in lines:
        logging.getLogger("shapevm." + component.lower()).log(_LEVELS[level], message)


def _shutdown():
    for program in list(_PROGRAMS):
        program.close()  # stops each JIT's compile thread while the interpreter is alive
    _core.stop_trace()  # writes a trace set_context(trace=...) started (no-op otherwise)
    _core._flush()
    _core._shutdown()


_core._set_log_handler(_log_lines)
atexit.register(_shutdown)
