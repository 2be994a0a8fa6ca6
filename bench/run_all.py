#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The benchmark suite's one entry point.

  1. correctness gate: `shapevm run examples/<variant>.py` at each JIT level on the peers' inputs
     (batch 32, seq 10 and 30, both variants), compared with PyTorch eager's outputs (and the
     float64 numpy oracle); a relative L2 error above 1e-5 fails the whole run, before any timing
  2. `shapevm bench --out DIR [--quick]` (ShapeVM's side: DIR/shapevm.json); a shapevm without the
     `bench` subcommand is reported and skipped
  3. bench/peers.py (PyTorch eager, TorchScript, numpy under each BLAS configuration: DIR/peers.json)
  4. bench/report.py: DIR/BENCHMARKS.generated.md and the PNG plots in DIR; with
     --write-benchmarks-md, also the generated section of BENCHMARKS.md (between
     <!-- bench:begin --> and <!-- bench:end -->) with the plots in docs/bench/

Usage: /usr/bin/python3 bench/run_all.py [--quick] [--out DIR] [--shapevm PATH] [--write-benchmarks-md]
Exit status: 0 when everything that ran passed; 1 on a correctness failure (gate or peer) or a failed step.
"""
import os
import sys

THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "GOTO_NUM_THREADS": "1", "BLIS_NUM_THREADS": "1"}
if __name__ == "__main__":
    for _k, _v in THREAD_ENV.items():  # before numpy/torch are imported anywhere in this process
        os.environ.setdefault(_k, _v)

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
import peers  # noqa: E402
import report  # noqa: E402

PY = "/usr/bin/python3"
GATE_SEQS = [10, 30]
GATE_TOL = 1e-5
RESULT_FILES = ["shapevm.json", "peers.json", "gate.json"]


def say(msg):
    print(f"[run_all] {msg}", flush=True)


def child_env():
    env = {**os.environ, **THREAD_ENV}
    env.pop("OPENBLAS_CORETYPE", None)
    return env


def shapevm_help(binary, *args):
    try:
        proc = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout + proc.stderr


def has_subcommand(help_text, name):
    """Whether `shapevm --help` lists the subcommand (CLI11: an indented line starting with it)."""
    return re.search(rf"^\s+{re.escape(name)}\s", help_text, re.M) is not None


def run_gate(binary, out_dir, iters, seqs=GATE_SEQS):
    """Returns the gate document; raises nothing (failures are rows with ok=False)."""
    import numpy as np
    doc = {"checks": [], "notes": [], "tolerance": GATE_TOL, "seqs": list(seqs), "batch": peers.BATCH, "seed": peers.SEED}
    run_help = shapevm_help(binary, "run")
    levels = ["O0", "O1", "O2"] if "--jit-level" in run_help else [None]
    if levels == [None]:
        doc["notes"].append("this shapevm has no `run --jit-level`: the gate ran its default (interpreter) only")
    wait = ["--jit-wait"] if "--jit-wait" in run_help else []
    gate_dir = out_dir / "gate"
    gate_dir.mkdir(parents=True, exist_ok=True)
    for variant in peers.VARIANTS:
        program = ROOT / "examples" / f"{variant}.py"
        for seq in seqs:
            inputs, params = peers.make_workload(peers.SEED, peers.BATCH, seq)
            in_npz, params_npz = gate_dir / f"in_{seq}.npz", gate_dir / "params.npz"
            np.savez(in_npz, **inputs)
            np.savez(params_npz, **params)
            th, tc = peers.torch_outputs(variant, inputs, params)
            oh, oc = peers.oracle(variant, inputs, params)
            torch_vs_oracle = max(peers.rel_l2(th, oh), peers.rel_l2(tc, oc))
            if not torch_vs_oracle <= GATE_TOL:  # the peer the gate trusts must itself be right
                doc["checks"].append({"variant": variant, "seq": seq, "level": "PyTorch", "ok": False,
                                      "error": f"PyTorch eager vs float64 oracle: {torch_vs_oracle:.3e}"})
                continue
            for level in levels:
                out_npz = gate_dir / f"out_{variant}_{seq}_{level or 'default'}.npz"
                if out_npz.exists():
                    out_npz.unlink()
                cmd = [binary, "run", str(program), "--inputs", str(in_npz), "--params", str(params_npz),
                       "--out", str(out_npz), "--iters", str(iters), "--quiet", "--stats"]
                if level:
                    cmd += ["--jit-level", level] + wait
                row = {"variant": variant, "seq": seq, "level": level or "default", "command": shlex.join(cmd)}
                t0 = time.perf_counter()
                try:
                    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=child_env())
                except subprocess.TimeoutExpired:
                    row.update(ok=False, error="timed out after 600 s")
                    doc["checks"].append(row)
                    continue
                row["wall_s"] = time.perf_counter() - t0
                m = re.search(r"interpreted (\d+), compiled (\d+)", proc.stdout)
                if m:
                    row["interpreted_calls"], row["compiled_calls"] = int(m.group(1)), int(m.group(2))
                if proc.returncode != 0 and "built without the JIT" in proc.stderr:
                    row.update(ok=True, skipped="this shapevm was built without the JIT")
                    doc["notes"].append(f"{variant} seq {seq} at {level}: skipped, this shapevm was built without the JIT")
                    doc["checks"].append(row)
                    continue
                if proc.returncode != 0 or not out_npz.exists():
                    row.update(ok=False, error=f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-2000:]}")
                    doc["checks"].append(row)
                    continue
                got = np.load(out_npz)
                if "out0" not in got or "out1" not in got:
                    row.update(ok=False, error=f"outputs {sorted(got.keys())}, expected out0 (h') and out1 (c')")
                    doc["checks"].append(row)
                    continue
                h, c = got["out0"], got["out1"]
                row.update(rel_l2_h_vs_torch=peers.rel_l2(h, th), rel_l2_c_vs_torch=peers.rel_l2(c, tc),
                           rel_l2_vs_oracle=max(peers.rel_l2(h, oh), peers.rel_l2(c, oc)),
                           dtype=str(h.dtype), shape=list(h.shape))
                row["ok"] = (h.dtype == np.float32 and c.dtype == np.float32
                             and row["rel_l2_h_vs_torch"] <= GATE_TOL and row["rel_l2_c_vs_torch"] <= GATE_TOL)
                if not row["ok"]:
                    row["error"] = (f"relative L2 vs PyTorch h' {row['rel_l2_h_vs_torch']:.3e}, c' {row['rel_l2_c_vs_torch']:.3e} "
                                    f"(limit {GATE_TOL}), dtype {h.dtype}, shape {list(h.shape)} vs {list(th.shape)}")
                if level in ("O1", "O2") and row.get("compiled_calls") == 0:
                    doc["notes"].append(f"{variant} seq {seq} at {level}: no compiled calls in {iters} runs; the gate "
                                        "checked interpreted outputs only")
                doc["checks"].append(row)
    return doc


def main(argv=None):
    parser = argparse.ArgumentParser(description="ShapeVM benchmark suite: gate, shapevm bench, peers, report")
    parser.add_argument("--quick", action="store_true", help="smoke-test sizes and repeats (peers ~40 s on a quiet machine)")
    parser.add_argument("--out", default=str(ROOT / "build" / "bench-out"), help="results directory (default build/bench-out)")
    parser.add_argument("--shapevm", default=str(ROOT / "build" / "tools" / "shapevm"), help="the shapevm binary")
    parser.add_argument("--write-benchmarks-md", action="store_true",
                        help="replace the generated section of BENCHMARKS.md and put the plots in docs/bench/")
    parser.add_argument("--benchmarks-md", default=str(ROOT / "BENCHMARKS.md"), help=argparse.SUPPRESS)
    parser.add_argument("--docs-dir", default=str(ROOT / "docs" / "bench"), help=argparse.SUPPRESS)
    parser.add_argument("--openblas-dir", default=None, help="passed to peers.py (OpenBLAS that is not the system default)")
    parser.add_argument("--coretype", default=None, help="passed to peers.py (OPENBLAS_CORETYPE values, comma list)")
    parser.add_argument("--gate-iters", type=int, default=12, help="`shapevm run --iters` for the gate (default 12)")
    parser.add_argument("--gate-seqs", default=",".join(map(str, GATE_SEQS)), help=argparse.SUPPRESS)
    parser.add_argument("--skip", default="", help="comma list of steps to skip: gate, shapevm, peers (development)")
    args = parser.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in RESULT_FILES:  # never report a previous run's numbers as this run's
        (out / name).unlink(missing_ok=True)
    command = "/usr/bin/python3 bench/run_all.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    failures = []
    started = time.perf_counter()
    binary = args.shapevm
    have_binary = Path(binary).is_file() and os.access(binary, os.X_OK)
    if not have_binary:
        say(f"WARNING: no shapevm binary at {binary} (build it, or pass --shapevm): the gate and the ShapeVM side "
            "are skipped; peers only")
        if not {"gate", "shapevm"} <= skip:
            failures.append(f"no shapevm binary at {binary}")

    # 1. Correctness gate.
    if "gate" not in skip and have_binary:
        gate_seqs = [int(x) for x in args.gate_seqs.split(",")]
        say(f"correctness gate: shapevm run vs PyTorch eager, seq {gate_seqs}, both variants")
        t0 = time.perf_counter()
        gate = run_gate(binary, out, args.gate_iters, gate_seqs)
        gate["wall_s"] = time.perf_counter() - t0
        (out / "gate.json").write_text(json.dumps(gate, indent=1))
        for note in gate["notes"]:
            say(f"gate note: {note}")
        bad = [c for c in gate["checks"] if not c.get("ok")]
        for c in gate["checks"]:
            status = "ok" if c.get("ok") else "FAIL"
            detail = (f"h' {c['rel_l2_h_vs_torch']:.2e}, c' {c['rel_l2_c_vs_torch']:.2e} vs PyTorch"
                      if "rel_l2_h_vs_torch" in c else c.get("error", c.get("skipped", "")))
            status = "skipped" if c.get("skipped") else status
            say(f"  {c['variant']} seq {c['seq']} {c['level']}: {status} ({detail})")
        if bad:
            say("FAILED: ShapeVM's outputs differ from PyTorch eager's (relative L2 above "
                f"{GATE_TOL}) — no benchmark numbers are produced for a wrong program:")
            for c in bad:
                say(f"  {c['variant']} seq {c['seq']} level {c['level']}: {c.get('error')}\n    {c.get('command', '')}")
            return 1
        say(f"gate passed in {gate['wall_s']:.0f} s")
    elif "gate" in skip:
        say("gate skipped (--skip gate)")

    # 2. ShapeVM's side.
    if "shapevm" not in skip and have_binary:
        if has_subcommand(shapevm_help(binary), "bench"):
            cmd = [binary, "bench", "--out", str(out)] + (["--quick"] if args.quick else [])
            say("ShapeVM side: " + shlex.join(cmd))
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=child_env())
            say(f"shapevm bench exited {proc.returncode} after {time.perf_counter() - t0:.0f} s")
            if proc.returncode != 0:
                failures.append(f"`{shlex.join(cmd)}` exited {proc.returncode}")
            elif not (out / "shapevm.json").exists():
                failures.append(f"`{shlex.join(cmd)}` wrote no {out / 'shapevm.json'}")
        else:
            say(f"NOTE: {binary} has no `bench` subcommand yet: the ShapeVM side is not measured "
                "(its report rows say 'not measured yet'); continuing with the peers")

    # 3. Peers.
    if "peers" not in skip:
        cmd = [PY, str(BENCH / "peers.py"), "--out", str(out)] + (["--quick"] if args.quick else [])
        if args.openblas_dir:
            cmd += ["--openblas-dir", args.openblas_dir]
        if args.coretype:
            cmd += ["--coretype", args.coretype]
        svm_stream = None
        try:
            svm_stream = report.load_json(out / "shapevm.json").get("stream")
        except (AttributeError, ValueError, OSError):
            pass
        if isinstance(svm_stream, list) and svm_stream and all(isinstance(x, int) and 1 <= x for x in svm_stream):
            cmd += ["--stream", ",".join(map(str, svm_stream))]  # time the peers on ShapeVM's stream
        say("peers: " + shlex.join(cmd))
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=child_env(), stdout=subprocess.DEVNULL)
        say(f"peers exited {proc.returncode} after {time.perf_counter() - t0:.0f} s")
        if proc.returncode != 0:
            say("FAILED: a peer is wrong or could not run (see above); no report")
            return 1

    # 4. Report.
    md_path = out / "BENCHMARKS.generated.md"
    report.build(out, command, image_prefix="", md_path=md_path)
    say(f"report: {md_path} (plots in {out})")
    if args.write_benchmarks_md and failures:
        say(f"NOT writing {args.benchmarks_md}: a step failed ({'; '.join(failures)})")
    elif args.write_benchmarks_md:
        bench_md = Path(args.benchmarks_md).resolve()
        docs = Path(args.docs_dir).resolve()
        docs.mkdir(parents=True, exist_ok=True)
        try:
            prefix = os.path.relpath(docs, bench_md.parent).replace(os.sep, "/") + "/"
        except ValueError:
            prefix = str(docs) + "/"
        generated = report.build(out, command, image_prefix=prefix, plot_dir=docs)
        existing = bench_md.read_text() if bench_md.exists() else ""
        bench_md.write_text(report.splice(existing, generated))
        say(f"wrote the generated section of {bench_md} and the plots in {docs}")
    say(f"done in {time.perf_counter() - started:.0f} s" + (f"; FAILURES: {'; '.join(failures)}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
