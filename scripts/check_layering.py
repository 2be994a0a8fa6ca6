#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# The layering check: fails when a file under src/ or include/shapevm/ includes a header of a layer
# above its own, or of a sibling layer of the same rank (frontend and vm never include each other),
# or a header sealed inside its layer (SEALED: the LLVM CPU backend behind the backend seam).
# LAYERS below is the one table of layers; every quoted include must resolve to a header that the
# table assigns to a layer, so a new src/ folder must get a row here before it builds a test green.
# Usage: scripts/check_layering.py [--root DIR]   (exit status 1 and one line per violation)
import argparse
import fnmatch
import pathlib
import re
import sys

# (layer, rank, the headers it owns: globs relative to src/ or include/). A layer may include its
# own headers and those of any layer of lower rank; same rank, different layer is forbidden.
LAYERS = [
    ("support", 0, ["support/*", "shapevm/status.h", "shapevm/errors.def"]),
    ("tensor", 1, ["tensor/*", "shapevm/dtype.h", "shapevm/tensor.h", "shapevm/value.h", "shapevm/npy.h"]),
    ("ops", 2, ["ops/*"]),
    ("bytecode", 3, ["bytecode/*"]),
    ("frontend", 4, ["frontend/*"]),
    ("vm", 4, ["vm/*"]),
    ("onnx", 4, ["onnx/*"]),  # the ONNX importer: ModelProto -> bytecode through the builder  # the interpreter: below jit, so it never includes the JIT
    ("jit", 5, ["jit/*"]),
    ("debug", 5, ["debug/*"]),  # the debugger core: on the vm, beside (never including) the JIT
    ("tune", 6, ["tune/*"]),
    ("session", 7, ["session/*", "shapevm/*"]),  # the public Session API (include/shapevm/shapevm.h)
    ("python", 8, ["python/*"]),  # the pybind11 extension shapevm._core, on the Session API
]

# Headers sealed inside their layer: (the headers, the files that alone may include them, why).
# The backend seam: the backend-neutral JIT, the tuner and the Session reach the LLVM CPU backend
# only through jit/backend.h's createBackend(), whose table (jit/backend_registry.cc) names it.
SEALED = [
    ("jit/llvm_cpu/*", ["jit/llvm_cpu/*", "jit/backend_registry.cc"],
     "a backend's headers are included only by the backend and the backend table (use jit/backend.h)"),
]

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.MULTILINE)
SOURCE_SUFFIXES = {".h", ".hpp", ".cc", ".cpp", ".def", ".inc"}


def layerOf(relative):
    """The (name, rank) owning a path relative to src/ or include/, or None. First match wins,
    so the specific shapevm/ public headers precede the session layer's catch-all."""
    for name, rank, globs in LAYERS:
        if any(fnmatch.fnmatchcase(relative, g) for g in globs):  # "*" also matches "/"
            return name, rank
    return None


def sourceFiles(root):
    """(path, path relative to its base folder) for every C++ source under src/ and include/."""
    for base in (root / "src", root / "include"):
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file() and path.suffix in SOURCE_SUFFIXES:
                yield path, path.relative_to(base).as_posix()


def resolve(root, including_file, target):
    """The include's path relative to src/ or include/ (same folder first, as the compiler does)."""
    local = including_file.parent / target
    if local.is_file():
        for base in (root / "src", root / "include"):
            try:
                return local.resolve().relative_to(base.resolve()).as_posix()
            except ValueError:
                pass
    for base in (root / "src", root / "include"):
        if (base / target).is_file():
            return target
    return None


def check(root):
    """Every violation as one line of text."""
    problems = []
    for path, relative in sourceFiles(root):
        owner = layerOf(relative)
        shown = path.relative_to(root).as_posix()
        if owner is None:
            problems.append(f"{shown}: not in any layer of the table in scripts/check_layering.py (add a row)")
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in INCLUDE.finditer(text):
            target = match.group(1)
            line = text.count("\n", 0, match.start()) + 1
            header = resolve(root, path, target)
            if header is None:
                problems.append(f'{shown}:{line}: "{target}" is not a header under src/ or include/')
                continue
            used = layerOf(header)
            if used is None:
                problems.append(f'{shown}:{line}: "{target}" is not in any layer of the table')
            elif used[0] != owner[0] and used[1] >= owner[1]:
                relation = "a sibling layer" if used[1] == owner[1] else "a layer above it"
                problems.append(f'{shown}:{line}: layer {owner[0]} includes "{target}" from {relation} ({used[0]})')
            else:
                for sealed, allowed, why in SEALED:
                    if fnmatch.fnmatchcase(header, sealed) and not any(
                            fnmatch.fnmatchcase(relative, a) for a in allowed):
                        problems.append(f'{shown}:{line}: includes "{target}": {why}')
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent, type=pathlib.Path)
    args = parser.parse_args()
    root = args.root.resolve()
    if not (root / "src").is_dir():
        print(f"check_layering: {root}/src does not exist", file=sys.stderr)
        return 2
    problems = check(root)
    for problem in problems:
        print(problem)
    order = ", ".join(f"{name} ({rank})" for name, rank, _ in LAYERS)
    if problems:
        print(f"check_layering: {len(problems)} violation(s); layers by rank: {order}", file=sys.stderr)
        return 1
    print(f"check_layering: ok ({sum(1 for _ in sourceFiles(root))} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
