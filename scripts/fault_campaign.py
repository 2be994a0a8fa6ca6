#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Fault injection against `shapevm run` (issue 24, item 5; RELIABILITY.md records the runs). Every
# trial must end with the reference outputs (within float rounding) or a clear error (exit code
# 1, an `error:` message naming what failed), never a signal, a hang or a wrong answer; and a
# clean run right after it, in the same cache directory, must give the reference outputs.
#   kill   kill -9 at a random moment of an O2 run that compiles, tunes and writes the kernel
#          cache and the tuning database (one cache directory across all trials)
#   alloc  every Nth system allocation of tensor storage fails (tunable fault_alloc_every)
#   oom    an address-space limit (ulimit -v) of a few sizes
#   fullfs cache writes fail: a file-size limit (ulimit -f, SIGXFSZ ignored: writes fail with
#          EFBIG), and a 64 KiB tmpfs as the cache directory where mount is allowed (root)
# Usage: scripts/fault_campaign.py [--bin build/tools/shapevm] [--trials N] [--modes kill,alloc,oom,fullfs]
#                                   [--seed S] [--quick]
import argparse
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "examples" / "lstm_cell.py"
# Two batch sizes, so a run installs and widens kernels; enough iterations to reach tuning.
RUN = ["--dim", "batch=2,5", "--dim", "seq=3", "--seed", "7", "--iters", "6", "--warmup", "0", "--hot-count", "1",
       "--hot-ms", "0", "--jit-wait"]
TIMEOUT_S = 300


class Campaign:
    def __init__(self, binary, work):
        self.binary = binary
        self.work = Path(work)
        self.findings = []
        self.trials = 0
        self.errors = 0  # trials that ended in a clear error (allowed)
        self.summaries = None
        self.reference = self.run_once([], "reference", level="O0", check=False)

    def command(self, out, level, extra):
        return [self.binary, "run", str(PROGRAM), *RUN, "--jit-level", level, *(["--out", str(out)] if out else []),
                *extra]

    def run_once(self, extra, name, level="O2", env=None, preexec=None, cache=None, check=True, kill_after=None,
                 use_out=True):
        out = self.work / f"{name}.npz" if use_out else None
        if out and out.exists():
            out.unlink()
        environment = dict(os.environ)
        environment["SHAPEVM_CACHE_DIR"] = str(cache or self.work / "cache")
        environment.update(env or {})
        proc = subprocess.Popen(self.command(out, level, extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=environment, preexec_fn=preexec)
        if kill_after is not None:
            try:
                proc.wait(timeout=kill_after)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
            proc.communicate()
            return None
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            self.finding(name, f"hung (no exit within {TIMEOUT_S} s)")
            return None
        if not check:
            assert proc.returncode == 0, stderr
            self.summaries = summaries(stdout)
            with np.load(out) as data:
                return {k: data[k] for k in data.files}
        return self.judge(name, proc.returncode, stdout, stderr, out)

    def judge(self, name, code, stdout, stderr, out):
        self.trials += 1
        if code < 0:
            self.finding(name, f"killed by signal {-code}: {stderr.strip()[-400:]}")
            return None
        if code == 127 and "error while loading shared libraries" in stderr:
            self.errors += 1  # the dynamic loader could not map the libraries: it never started
            return "error"
        if code != 0:
            if re.search(r"(^|\n)shapevm: error: \w+", stderr):
                self.errors += 1
                return "error"
            self.finding(name, f"exit code {code} without a clear error: {stderr.strip()[-400:]}")
            return None
        if out is None:  # the printed summaries (mean, min, max of each output)
            got = summaries(stdout)
            if len(got) != len(self.summaries) or not all(
                    np.allclose(g, w, rtol=1e-4, atol=1e-6) for g, w in zip(got, self.summaries)):
                self.finding(name, f"wrong answer: summaries {got} against {self.summaries}")
                return None
            return "ok"
        with np.load(out) as data:
            got = {k: data[k] for k in data.files}
        for key, want in self.reference.items():
            if key not in got or got[key].shape != want.shape:
                self.finding(name, f"output {key} missing or of another shape")
                return None
            err = np.linalg.norm(got[key] - want) / max(np.linalg.norm(want), 1e-30)
            if err > 1e-5:
                self.finding(name, f"wrong answer: {key} relative L2 {err:.2e}")
                return None
        return "ok"

    def finding(self, name, what):
        self.findings.append(f"{name}: {what}")
        print(f"FINDING {name}: {what}", flush=True)

    def after(self, name, cache=None):
        """The next clean run in the same cache directory must work."""
        if self.run_once([], name + "-after", cache=cache) != "ok":
            self.finding(name, "the clean run after it did not give the reference outputs")


def summaries(stdout):
    """[mean, min, max] of each `outN: f32[..] mean=.. min=.. max=..` line."""
    return [[float(v) for v in re.findall(r"=(-?[\d.e+-]+|-?inf|nan)", line)] for line in stdout.splitlines()
            if re.match(r"out\d+: ", line)]


def mode_kill(c, trials, rng):
    # How long an undisturbed O2 run with tuning takes, from a fresh cache, bounds the kill moment.
    start = time.monotonic()
    c.run_once([], "kill-timing", cache=c.work / "timing-cache")
    span = max(time.monotonic() - start, 0.5)
    for t in range(trials):
        if t % 10 == 0:
            shutil.rmtree(c.work / "cache", ignore_errors=True)  # from cold again: compiles and writes
            print(f"kill: {t} trials, {len(c.findings)} findings so far", flush=True)
        c.run_once([], f"kill-{t}", kill_after=rng.uniform(0.0, span))
        c.after(f"kill-{t}")


def mode_alloc(c, trials, rng):
    everies = sorted(set([1, 2, 3, 5, 8, 13, 21, 34, 55, 89] + [rng.randint(2, 400) for _ in range(max(trials - 10, 0))]))
    for every in everies[:max(trials, 1)]:
        name = f"alloc-every-{every}"
        c.run_once([], name, env={"SHAPEVM_FAULT_ALLOC_EVERY": str(every)})
        c.after(name)


def limit(kind, value, ignore_xfsz=False):
    def apply():
        resource.setrlimit(kind, (value, value))
        if ignore_xfsz:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return apply


def mode_oom(c, trials, rng):
    sizes_mb = [64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048]
    for mb in sizes_mb[:max(trials, 1)]:
        name = f"oom-{mb}MB"
        c.run_once([], name, preexec=limit(resource.RLIMIT_AS, mb << 20))
        c.after(name)


def mode_fullfs(c, trials, rng):
    for kib in [0, 1, 4, 16, 64][:max(trials, 1)]:
        name = f"fsize-{kib}KiB"
        cache = c.work / f"fs-cache-{kib}"
        shutil.rmtree(cache, ignore_errors=True)
        # The limit holds for every file the process writes, so the outputs are judged by their
        # printed summaries rather than an --out file.
        c.run_once([], name, cache=cache, use_out=False,
                   preexec=limit(resource.RLIMIT_FSIZE, kib << 10, ignore_xfsz=True))
        c.after(name, cache=cache)
    mount = c.work / "tmpfs-cache"
    mount.mkdir(exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True).returncode != 0:
        print("fullfs: tmpfs mount not allowed here (not root); only the file-size limit ran", flush=True)
        return
    try:
        with open(mount / "filler", "wb") as f:  # fill it up
            try:
                f.write(b"\0" * (64 << 10))
            except OSError:
                pass
        c.run_once([], "tmpfs-full", cache=mount)
        c.after("tmpfs-full", cache=mount)
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


MODES = {"kill": mode_kill, "alloc": mode_alloc, "oom": mode_oom, "fullfs": mode_fullfs}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin", default=str(ROOT / "build" / "tools" / "shapevm"))
    parser.add_argument("--trials", type=int, default=200, help="kill trials (the other modes run up to this many)")
    parser.add_argument("--modes", default="kill,alloc,oom,fullfs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", help="working directory (default: a temporary one, removed)")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="svm-faults-")
    Path(work).mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    c = Campaign(args.bin, work)
    started = time.monotonic()
    for mode in args.modes.split(","):
        if mode not in MODES:
            sys.exit(f"unknown mode {mode!r} (kill, alloc, oom, fullfs)")
        before = (c.trials, len(c.findings))
        MODES[mode](c, args.trials, rng)
        print(f"{mode}: {c.trials - before[0]} judged runs, {len(c.findings) - before[1]} findings", flush=True)
    print(f"total: {c.trials} judged runs ({c.errors} clear errors, the rest the reference outputs), "
          f"{len(c.findings)} findings, {time.monotonic() - started:.0f} s")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if c.findings else 0)


if __name__ == "__main__":
    main()
