#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Regenerates the ONNX backend node tests (model.onnx + test_data_set_N/*.pb per case) from the
# generators Debian's python3-onnx ships (onnx/backend/test/case), offline, into OUT/node/. ONNX
# 1.12's generators still use numpy aliases that numpy >= 1.24 removed (np.float, np.int, ...);
# this wrapper restores them before importing the generators, and seeds numpy's global random
# state so every build writes the same inputs. Writes OUT/stamp last (the build's output file).
# Usage: generate_onnx_node_data.py OUT
import argparse
import os
import pathlib
import shutil
import sys

import numpy as np

# The aliases as numpy < 1.24 defined them (each was the Python builtin).
_REMOVED_ALIASES = {"bool": bool, "int": int, "float": float, "complex": complex, "object": object,
                    "str": str, "long": int, "unicode": str}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=pathlib.Path)
    out = parser.parse_args().out.resolve()
    for name, value in _REMOVED_ALIASES.items():
        if name not in np.__dict__:
            setattr(np, name, value)
    np.random.seed(0)
    from onnx.backend.test import cmd_tools  # pylint: disable=import-outside-toplevel

    # Generate beside the target and swap it in, so an interrupted run never leaves half a tree.
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    cmd_tools.generate_data(argparse.Namespace(output=str(partial), op_type=None))
    node_cases = sum(1 for entry in os.scandir(partial / "node") if entry.is_dir())
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    (out / "stamp").write_text(f"{node_cases} ONNX node test cases\n")
    print(f"generate_onnx_node_data: {node_cases} node test cases in {out / 'node'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
