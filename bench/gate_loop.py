#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# The float32 LSTM gate kernel against its port limit (issue 19): compiles the cell's gate math
# (bench/cell_bound.py's GateMath) at seq 10, takes the tuner's kernel object from the kernel cache,
# prints its inner loop's instruction mix per 16 outputs, runs llvm-mca on it (--mca-cpu, if
# llvm-mca-19 is installed), and times the same instructions in a C harness (if gcc is installed):
# every pointer walks rows of 1 KiB through a region of its own, so the working set is L1, L2 or
# beyond while the instructions stay the jitted ones. Thread CPU time; cycles from a dependent imul
# chain timed the same way (3 cycles each). BENCHMARKS.md, "The float32 gate kernel against its
# port limit (issue 19)".
# Usage: PYTHONPATH=build/python:bench /usr/bin/python3 bench/gate_loop.py [--mca-cpu skylake-avx512]
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402

import shapevm  # noqa: E402
from cell_bound import BATCH, GateMath  # noqa: E402  (bench/)

HARNESS_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <xmmintrin.h>
void gate_stream(float* base, long iters, long rows, long region);
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char** argv) {
  _mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ and DAZ: no assists whatever the placeholder values */
  const int streams = atoi(argv[1]), vectors_per_row = atoi(argv[2]);
  long n = 20000000 / 3; double best = 1e9;
  for (int r = 0; r < 7; r++) { double t = now(); long a = 3;
    for (long i = 0; i < n; i++) __asm__ volatile(".rept 48\n\timul %0,%0\n\t.endr" : "+r"(a));
    t = now() - t; if (t < best) best = t; }
  const double ghz = 3.0 * 48 * n / best / 1e9;
  for (int k = 3; k < argc; ++k) {
    const long rows = atol(argv[k]), region = rows * 1024 + 4096;
    float* buf = aligned_alloc(4096, region * streams + 8192);
    for (long i = 0; i < (region * streams + 8192) / 4; ++i) buf[i] = 0.5f + 0.001f * (i % 97);
    const long iters = 100000; double bt = 1e9;
    for (int r = 0; r < 7; r++) { double t = now(); gate_stream(buf, iters, rows, region); t = now() - t; if (t < bt) bt = t; }
    const double per16 = bt / (iters * (double)vectors_per_row);
    printf("| %ld | %.2f | %.1f | %.2f |\n", rows, region * streams / 1048576.0, per16 * ghz * 1e9, per16 * 1e9);
    free(buf);
  }
  printf("clock: %.2f GHz (dependent imul)\n", ghz);
  return 0;
}
"""

PORTS_C = r"""
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
/* 14 independent zmm destinations (zmm2..zmm15) per pass, 32 passes per iteration */
#define INDEP(op) ".rept 32\n\t.irp d,2,3,4,5,6,7,8,9,10,11,12,13,14,15\n\t" op "\n\t.endr\n\t.endr"
#define TIME(name, body, per)                                                                             \
  best = 1e9;                                                                                             \
  for (int r = 0; r < 7; r++) {                                                                           \
    double t = now();                                                                                     \
    for (long i = 0; i < m; i++) __asm__ volatile(body ::: "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", \
                                                  "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",   \
                                                  "xmm14", "xmm15");                                      \
    t = now() - t; if (t < best) best = t;                                                                \
  }                                                                                                       \
  printf("| %s | %.2f |\n", name, best * ghz * 1e9 / m / (per));
int main(void) {
  long n = 20000000 / 3, m = 200000; double best = 1e9;
  for (int r = 0; r < 7; r++) { double t = now(); long a = 3;
    for (long i = 0; i < n; i++) __asm__ volatile(".rept 48\n\timul %0,%0\n\t.endr" : "+r"(a));
    t = now() - t; if (t < best) best = t; }
  const double ghz = 3.0 * 48 * n / best / 1e9;
  printf("| instruction (zmm) | cycles each |\n|---|---:|\n");
  TIME("vfmadd231ps, independent", INDEP("vfmadd231ps %%zmm0,%%zmm1,%%zmm\\d"), 32 * 14)
  TIME("vaddps, independent", INDEP("vaddps %%zmm0,%%zmm1,%%zmm\\d"), 32 * 14)
  TIME("vmulps, independent", INDEP("vmulps %%zmm0,%%zmm1,%%zmm\\d"), 32 * 14)
  TIME("vrcp14ps, independent", INDEP("vrcp14ps %%zmm0,%%zmm\\d"), 32 * 14)
  TIME("vpslld $23, independent", INDEP("vpslld $23,%%zmm0,%%zmm\\d"), 32 * 14)
  TIME("vmaxps, independent", INDEP("vmaxps %%zmm0,%%zmm1,%%zmm\\d"), 32 * 14)
  TIME("vmovaps (register copy)", INDEP("vmovaps %%zmm0,%%zmm\\d"), 32 * 14)
  TIME("vfmadd231ps, one dependent chain", ".rept 448\n\tvfmadd231ps %%zmm0,%%zmm1,%%zmm2\n\t.endr", 448)
  printf("clock: %.2f GHz (dependent imul)\n", ghz);
  return 0;
}
"""


def kernel_object(cache):
    """The gate kernel the tuner kept: the ELF inside its .svmk cache entry."""
    record = next(line for line in (cache / "tuning.jsonl").read_text().splitlines() if "Sigmoid" in line)
    params = re.search(r'"params":"([^"]*)"', record).group(1)
    values = dict(re.findall(r"(\w+)=(\d+)", params))
    suffix = (f"_vw{values['vw']}" if "vw" in values else "") + (f"_u{values['unroll']}" if "unroll" in values else "")
    for path in (cache / "kernels").glob("*.svmk"):
        data = path.read_bytes()
        name = re.search(rb"svm_fused_add_sigmoid[a-z0-9_]*", data)
        if name and name.group(0).decode().endswith("d2x256" + suffix):
            return data[data.index(b"\x7fELF"):], params
    raise SystemExit(f"no kernel object for the tuner's choice {params!r}")


def inner_loop(disassembly):
    """The innermost loop's instructions (AT&T, as objdump prints them): the backward branch
    spanning the most instructions that contains no other branch."""
    lines = []
    for line in disassembly.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\t(.*)$", line)
        if m:
            lines.append((int(m.group(1), 16), re.sub(r"\s*<.*>", "", m.group(2)).strip()))
    best = None
    for i, (_, text) in enumerate(lines):
        m = re.match(r"j\w+\s+([0-9a-f]+)$", text)
        if not m or not text.startswith("jne"):
            continue
        target = int(m.group(1), 16)
        start = next((k for k, (a, _) in enumerate(lines) if a == target), None)
        if start is None or start > i or any(t.startswith("j") for _, t in lines[start:i]):
            continue
        if best is None or i - start > best[1] - best[0]:
            best = (start, i)
    return [t for _, t in lines[best[0]:best[1] + 1]]


def harness_asm(loop):
    """gate_stream(base, iters, rows, region): the loop body as jitted, each base register walking
    rows of 1 KiB through its own region; zmm registers and stack slots hold placeholder values."""
    step, bound = re.match(r"add\s+\$(0x[0-9a-f]+),%(\w+)", loop[-3]), re.match(r"cmp\s+\$(0x[0-9a-f]+),", loop[-2])
    if step is None:  # `sub $-0x80`: how LLVM adds 128 (a 1-byte immediate)
        negated = re.match(r"sub\s+\$(0x[0-9a-f]+),%(\w+)", loop[-3])
        step = re.match(r"(0x[0-9a-f]+) (\w+)", f"{(1 << 64) - int(negated.group(1), 16):#x} {negated.group(2)}")
    index = step.group(2)
    body = loop[:-3]
    bases = sorted({m.group(1) for t in body for m in re.finditer(r"\(%(\w+),%" + index, t)} - {"rsp"})
    offsets = [int(m.group(1), 16) for t in body for m in re.finditer(r"(-0x[0-9a-f]+)\(%\w+,%" + index, t)]
    bias = -min(offsets, default=0)
    used = {m.group(1) for t in body for m in re.finditer(r"%(r\w+|e\w+)", t)}
    spare = [r for r in ("rdi", "r8", "r10", "r9", "rsi", "rdx", "rcx") if r not in used and r != index]
    counter, rows = spare[0], spare[1]
    mine = 0x7c0  # the harness's own slots, above any the loop uses
    out = [".text", ".globl gate_stream", "gate_stream:",
           "  push %rbx; push %rbp; push %r12; push %r13; push %r14; push %r15", "  sub $0x800, %rsp",
           f"  mov %rdi, {mine:#x}(%rsp); mov %rsi, {mine + 8:#x}(%rsp)",
           f"  mov %rdx, {mine + 16:#x}(%rsp); mov %rcx, {mine + 24:#x}(%rsp)",
           "  mov $0x3f000000, %eax", "  vpbroadcastd %eax, %zmm31"]
    out += [f"  vmovups %zmm31, {off:#x}(%rsp)" for off in range(0, mine, 0x40)]
    out += [f"  vmovaps %zmm31, %zmm{i}" for i in range(31)]
    out += ["4:", f"  mov {mine:#x}(%rsp), %{counter}", f"  mov {mine + 24:#x}(%rsp), %{rows}",
            f"  lea {bias:#x}(%{counter}), %{bases[0]}"]
    out += [f"  lea (%{a},%{rows},1), %{b}" for a, b in zip(bases, bases[1:])]
    out += [f"  mov {mine + 16:#x}(%rsp), %{rows}", "2:", f"  xor %{index}, %{index}", "3:"]
    out += ["  " + t for t in body]
    out += [f"  add ${step.group(1)}, %{index}", f"  cmp ${bound.group(1)}, %{index}", "  jne 3b"]
    out += [f"  add $0x400, %{b}" for b in bases]
    out += [f"  decq {mine + 8:#x}(%rsp)", "  jz 5f", f"  dec %{rows}", "  jnz 2b", "  jmp 4b", "5:",
            "  add $0x800, %rsp", "  pop %r15; pop %r14; pop %r13; pop %r12; pop %rbp; pop %rbx", "  vzeroupper",
            "  ret", ""]
    return "\n".join(out), len(bases), int(bound.group(1), 16) // 64, int(step.group(1), 16) // 64


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mca-cpu", action="append", default=None, help="llvm-mca -mcpu (repeatable)")
    parser.add_argument("--rows", default="1,4,180,2160", help="rows of 1 KiB per pointer, comma-separated")
    args = parser.parse_args()
    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        os.environ["SHAPEVM_CACHE_DIR"] = str(cache)
        shapevm.set_context(jit_level="O2", kernel_threads=1, hot_count=2)
        gates = GateMath(wait=True)
        seq = 10
        a = (rng.standard_normal((BATCH * seq, 1024), np.float32) * 2, rng.standard_normal((BATCH, 1024), np.float32),
             rng.standard_normal((BATCH, 256), np.float32), rng.standard_normal((BATCH, seq, 128), np.float32))
        for _ in range(60):
            gates(a[0], a[1], a[2], a[3])
        obj, params = kernel_object(cache)
        (Path(tmp) / "k.o").write_bytes(obj)
        disassembly = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(Path(tmp) / "k.o")],
                                     capture_output=True, text=True, check=True).stdout
        loop = inner_loop(disassembly)
        asm, streams, vectors, per = harness_asm(loop)  # vectors of 16 outputs per row, per iteration
        print(f"Tuner's choice: {params}; inner loop: {len(loop)} instructions, {per} vectors of 16 outputs")
        print("\n| instruction | per 16 outputs |\n|---|---:|")
        for op, count in collections.Counter(t.split()[0] for t in loop).most_common():
            print(f"| {op} | {count / per:.2f} |")
        (Path(tmp) / "loop.s").write_text("\n".join(loop) + "\n")
        mca = shutil.which("llvm-mca-19") or shutil.which("llvm-mca")
        for cpu in (args.mca_cpu or ["sapphirerapids", "skylake-avx512"]) if mca else []:
            run = subprocess.run([mca, f"-mcpu={cpu}", "-iterations=300", str(Path(tmp) / "loop.s")],
                                 capture_output=True, text=True)
            out = run.stdout
            if "Total Cycles" not in out:
                print(f"\nllvm-mca -mcpu={cpu} failed: {(run.stderr.strip().splitlines() or ['?'])[0]}")
                continue
            cycles = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1))
            names = dict(re.findall(r"^\[(\d+)\]\s+- (\w+)$", out, re.M))
            pressure = re.search(r"Resource pressure per iteration:\n(.*)\n(.*)\n", out)
            busy = [f"{names.get(k.strip('[]'), k)} {float(v) / per:.1f}"
                    for k, v in zip(pressure.group(1).split(), pressure.group(2).split()) if v != "-" and float(v) >= 1]
            print(f"\nllvm-mca -mcpu={cpu}: {cycles / 300 / per:.1f} cycles per 16 outputs; "
                  f"busy cycles per 16 outputs: {', '.join(busy)}")
        if shutil.which("gcc"):
            (Path(tmp) / "p.c").write_text(PORTS_C)
            subprocess.run(["gcc", "-O2", "-o", str(Path(tmp) / "p"), str(Path(tmp) / "p.c")], check=True)
            print("\nThroughput and latency of the loop's instructions, thread CPU, best of 7:\n")
            sys.stdout.flush()
            subprocess.run([str(Path(tmp) / "p")], check=True)
            (Path(tmp) / "h.c").write_text(HARNESS_C)
            (Path(tmp) / "h.S").write_text(asm)
            subprocess.run(["gcc", "-O2", "-o", str(Path(tmp) / "h"), str(Path(tmp) / "h.c"), str(Path(tmp) / "h.S"),
                            "-Wl,-z,noexecstack"], check=True)
            print("\nThe jitted loop in the harness, thread CPU, best of 7:\n")
            print("| rows per pointer | working set MiB | cycles per 16 outputs | ns per 16 outputs |\n|---:|---:|---:|---:|")
            sys.stdout.flush()
            subprocess.run([str(Path(tmp) / "h"), str(streams), str(vectors)] + args.rows.split(","), check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
