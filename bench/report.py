#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmark report: reads DIR/shapevm.json (from `shapevm bench --out DIR`), DIR/peers.json
(from bench/peers.py) and DIR/gate.json (bench/run_all.py's correctness gate), writes markdown
for BENCHMARKS.md and PNG plots (matplotlib, Agg) into DIR.

Every section of every input is optional: what is missing becomes a "not measured yet" row, never
an error. Ratios are always against a peer measured in the same run_all.py run; where a peer ran
under several BLAS configurations the ratio uses the fastest of them for that row (the
comparison least flattering to ShapeVM) and names it.

Usage: /usr/bin/python3 bench/report.py [--dir DIR] [--md FILE] [--image-prefix PREFIX] [--command CMD]
"""
import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"
NOT_MEASURED = "not measured yet"
LEVELS = ["O0", "O1", "O2"]
VARIANTS = [("lstm_cell", "flattened cell (`examples/lstm_cell.py`)"),
            ("lstm_loop", "looped recurrence (`examples/lstm_loop.py`)")]
BASE_PEERS = [("pytorch", "PyTorch eager"), ("torchscript", "TorchScript"), ("numpy", "numpy")]
PLOTS = {"latency": "latency_vs_seq.png", "matmul": "matmul_gflops.png", "timeline": "timeline.png",
         "elementwise": "elementwise_gbps.png"}


# --------------------------------------------------------------------------------------------
# Loading and formatting.

def load_json(path):
    """The parsed file, or None when it does not exist; a file that is not JSON is an error
    (a truncated result file should not silently become 'not measured')."""
    path = Path(path)
    if not path.exists():
        return None
    with open(path) as f:
        return json.load(f)


def num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def f3(v, unit=""):
    """Three significant digits, no exponent for ordinary magnitudes."""
    if not num(v):
        return "—"
    a = abs(v)
    if a >= 100:
        s = f"{v:.0f}"
    elif a >= 10:
        s = f"{v:.1f}"
    elif a >= 1:
        s = f"{v:.2f}"
    elif a >= 0.01:
        s = f"{v:.3f}"
    elif a == 0:
        s = "0"
    else:
        s = f"{v:.2e}"
    return s + unit


def frange(med, lo=None, hi=None):
    if not num(med):
        return "—"
    if num(lo) and num(hi):
        return f"{f3(med)} ({f3(lo)}–{f3(hi)})"
    return f3(med)


def fratio(a, b):
    if not (num(a) and num(b)) or b == 0:
        return "—"
    r = a / b
    return f"{r:.2f}" if r >= 0.1 else f"{r:.3f}"


def fbytes(v):
    if not num(v):
        return "—"
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= scale:
            return f"{v / scale:.2f} {unit}"
    return f"{v:.0f} B"


def table(header, rows, align=None):
    """Markdown table; `rows` empty gives one 'not measured yet' row."""
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    if not rows:
        rows = [[NOT_MEASURED] + [""] * (len(header) - 1)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def seq_key(seq):
    return (1, 0) if seq == "stream" else (0, seq)


def seq_label(seq):
    return "stream 8..128" if seq == "stream" else str(seq)


def config_tag(row):
    """Short name of a peer row's BLAS configuration ('' for the shipped one)."""
    cfg = row.get("config") or "shipped"
    if cfg == "shipped":
        return ""
    return cfg.lstrip("+").replace("+OPENBLAS_CORETYPE=", " CORETYPE=").replace("OPENBLAS_CORETYPE=", "CORETYPE=")


def section(doc, key):
    """A list section of a JSON document, [] when absent or malformed."""
    if not isinstance(doc, dict):
        return []
    value = doc.get(key)
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


# --------------------------------------------------------------------------------------------
# Lookups.

class Data:
    def __init__(self, svm, peers, gate):
        self.svm = svm if isinstance(svm, dict) else {}
        self.peers = peers if isinstance(peers, dict) else {}
        self.gate = gate if isinstance(gate, dict) else {}
        self.svm_workload = section(self.svm, "workload")
        self.peer_workload = section(self.peers, "workload")
        self.stream_svm = self.svm.get("stream") if isinstance(self.svm.get("stream"), list) else None
        self.stream_peers = (self.peers.get("meta") or {}).get("stream") or None

    def svm_row(self, variant, level, seq):
        for r in self.svm_workload:
            if r.get("variant") == variant and r.get("level") == level and r.get("seq") == seq:
                return r
        return None

    def metric(self, row, seq):
        """(median, min, max) of a workload row: ms per call for a fixed seq, us per token
        (per-call, median over the calls) for the stream, where calls differ in size."""
        if not row:
            return None, None, None
        if seq == "stream":
            if num(row.get("median_us_per_token")):
                return row["median_us_per_token"], row.get("min_us_per_token"), row.get("max_us_per_token")
            tok = self.tokens(row, seq)
            if tok and num(row.get("median_ms")):
                k = 1e3 / tok
                return (row["median_ms"] * k, row["min_ms"] * k if num(row.get("min_ms")) else None,
                        row["max_ms"] * k if num(row.get("max_ms")) else None)
            return None, None, None
        return row.get("median_ms"), row.get("min_ms"), row.get("max_ms")

    def best_peer(self, rows, seq=None):
        rows = [r for r in rows if num(self.metric(r, seq)[0])]
        return min(rows, key=lambda r: self.metric(r, seq)[0]) if rows else None

    def peer_rows(self, base, variant, seq):
        return [r for r in self.peer_workload if r.get("base_peer", r.get("peer")) == base
                and r.get("variant") == variant and r.get("seq") == seq]

    def seqs(self, variant):
        found = {r.get("seq") for r in self.svm_workload + self.peer_workload if r.get("variant") == variant}
        found = {s for s in found if s == "stream" or (isinstance(s, int) and not isinstance(s, bool))}
        return sorted(found, key=seq_key)

    def tokens(self, row, seq):
        """Tokens (rows of batch*seq) per call of a row, for us/token."""
        if num(row.get("tokens_per_call")):
            return row["tokens_per_call"]
        batch = row.get("batch", 32)
        if seq == "stream":
            stream = self.stream_svm or self.stream_peers
            return batch * statistics.mean(stream) if stream else None
        return batch * seq if isinstance(seq, int) else None


def cpu_summary(cpu_name, features):
    """' (znver5; AVX-512, AVX2, FMA)' from the CPU name and a feature list, or ''."""
    flags = set(str(features or "").replace(",", " ").split())
    isa = [name for flag, name in (("avx512f", "AVX-512"), ("avx512_bf16", "BF16"), ("avx512bf16", "BF16"),
                                   ("amx_tile", "AMX"), ("avx2", "AVX2"), ("fma", "FMA")) if flag in flags]
    isa = list(dict.fromkeys(isa))
    parts = ([str(cpu_name)] if cpu_name else []) + ([", ".join(isa)] if isa else [])
    return f" ({'; '.join(parts)})" if parts else ""


def cell_peer(d, row, seq):
    if not row:
        return "—"
    tag = config_tag(row)
    return frange(*d.metric(row, seq)) + (f" [{tag}]" if tag else "")


# --------------------------------------------------------------------------------------------
# Markdown.

def render(svm, peers, gate, command="/usr/bin/python3 bench/run_all.py", image_prefix="", plots=None):
    d = Data(svm, peers, gate)
    meta = d.peers.get("meta") or {}
    lines = []
    w = lines.append
    cpu = d.svm.get("cpu") or meta.get("cpu") or "unknown CPU"
    date = d.svm.get("date") or meta.get("date") or "unknown date"
    threads = d.svm.get("threads", meta.get("threads", 1))
    quick = bool(d.svm.get("quick") or meta.get("quick"))
    w("## Benchmark suite (generated)")
    w("")
    w(f"Command: `{command}`{' (quick mode: fewer sizes and repeats; a smoke test, not figures to quote)' if quick else ''}.")
    w(f"Date {date}; CPU {cpu}" + cpu_summary(d.svm.get("cpu_name"), d.svm.get("features") or meta.get("features")) +
      f"; {threads} thread; medians with min–max over interleaved rounds.")
    if d.svm and meta:
        w("ShapeVM's side (`shapevm bench`) and the peers run one after the other in the same run_all.py run; "
          "each side interleaves its own comparisons (levels; peers and BLAS configurations) round by round, so "
          "ratios within a side are the most robust, ratios across sides carry the machine's drift between them.")
    if meta:
        load = meta.get("load_average")
        w(f"Peers: torch {meta.get('torch', '?')}, numpy {meta.get('numpy', '?')}, float32, 1 thread; "
          f"peer run took {f3(meta.get('wall_s'))} s" +
          (f"; load average when it started {', '.join(f'{x:.1f}' for x in load)}" if load else "") +
          (f"; first touch of a fresh 4 KiB page costs {f3(meta['page_fault_us'])} µs here (it weighs on every "
           "allocating op above glibc's mmap threshold)" if num(meta.get("page_fault_us")) else "") + ".")
        configs = meta.get("configs") or []
        if configs:
            w("BLAS configurations the numpy/PyTorch/TorchScript peers ran under (each in its own process): " +
              "; ".join(f"`{c.get('suffix') or 'shipped'}` = {c.get('blas')}" for c in configs) + ".")
    else:
        w("Peers: " + NOT_MEASURED + " (no peers.json).")
    if not d.svm:
        w("ShapeVM side: " + NOT_MEASURED + " (no shapevm.json: `shapevm bench` missing or failed).")
    for note in (d.peers.get("notes") or []) + (d.svm.get("notes") or []):
        w(f"Note: {note}")
    w("")
    w("Ratios are ShapeVM / peer (below 1: ShapeVM is faster for latencies; above 1: higher throughput "
      "for GFLOP/s and GB/s). Where a peer ran under several BLAS configurations, the ratio uses the "
      "fastest configuration for that row, named in brackets.")
    w("")

    # Correctness gate ---------------------------------------------------------------------
    w("### Correctness gate")
    w("")
    w("`shapevm run` on the peers' inputs (batch 32) at each JIT level, compared with PyTorch eager's "
      "float32 outputs and the float64 numpy oracle; the run fails above a relative L2 error of 1e-5.")
    w("")
    rows = []
    for r in section(d.gate, "checks"):
        rows.append([r.get("variant", "?"), r.get("seq", "?"), r.get("level", "?"),
                     f"{r['rel_l2_h_vs_torch']:.2e}" if num(r.get("rel_l2_h_vs_torch")) else "—",
                     f"{r['rel_l2_c_vs_torch']:.2e}" if num(r.get("rel_l2_c_vs_torch")) else "—",
                     f"{r['rel_l2_vs_oracle']:.2e}" if num(r.get("rel_l2_vs_oracle")) else "—",
                     ("skipped: " + str(r["skipped"])) if r.get("skipped") else ("ok" if r.get("ok") else "**FAIL**")])
    lines += table(["variant", "seq", "level", "h' vs PyTorch", "c' vs PyTorch", "worst vs float64 oracle", "result"],
                   rows, ["---", "---:", "---", "---:", "---:", "---:", "---"])
    for note in d.gate.get("notes") or []:
        w("")
        w(f"Note: {note}")
    w("")

    # Workload ---------------------------------------------------------------------------------
    w("### Reference workload: latency per call (ms)")
    w("")
    w("Batch 32, float32. ShapeVM at O0 (interpreter), O1, O2; peers PyTorch eager, TorchScript "
      "(`torch.jit.script` of the same function, profiling executor, warmed up on seq 10/20/30 first), "
      "numpy. The stream row cycles a fixed shuffled list of seq in 8..128, call after call.")
    svm_has_stream = any(r.get("seq") == "stream" for r in d.svm_workload)
    peers_have_stream = any(r.get("seq") == "stream" for r in d.peer_workload)
    if d.stream_svm and d.stream_peers and list(d.stream_svm) != list(d.stream_peers):
        w("**The ShapeVM and peer streams differ** (different seq lists): compare their stream rows per token only, "
          "and with care.")
    elif svm_has_stream and peers_have_stream and not d.stream_svm:
        w("The stream row is in µs per token (median over calls) on both sides; shapevm.json does not list its "
          "stream, so the two sides may have drawn different seq lists from 8..128.")
    elif svm_has_stream or peers_have_stream:
        w("The stream row is in µs per token (per call, median over the calls): calls differ in size.")
    w("")
    for variant, title in VARIANTS:
        w(f"**{title}**")
        w("")
        rows = []
        for seq in d.seqs(variant):
            svm_rows = [d.svm_row(variant, lvl, seq) for lvl in LEVELS]
            best = {base: d.best_peer(d.peer_rows(base, variant, seq), seq) for base, _ in BASE_PEERS}
            torch_value = d.metric(best["pytorch"], seq)[0]
            rows.append([seq_label(seq) + (" (µs/token)" if seq == "stream" else "")] +
                        [frange(*d.metric(r, seq)) if r else "—" for r in svm_rows] +
                        [cell_peer(d, best[base], seq) for base, _ in BASE_PEERS] +
                        [fratio(d.metric(r, seq)[0], torch_value) for r in svm_rows])
        lines += table(["seq", "ShapeVM O0", "ShapeVM O1", "ShapeVM O2", "PyTorch eager", "TorchScript", "numpy",
                        "O0 / PyTorch", "O1 / PyTorch", "O2 / PyTorch"], rows)
        o2 = [d.svm_row(variant, "O2", s) for s in (10, 20, 30)]
        if all(r and num(r.get("median_ms")) for r in o2):
            meds = [r["median_ms"] for r in o2]
            w("")
            w(f"O2 flatness over seq 10/20/30: medians {', '.join(f3(m) for m in meds)} ms, spread "
              f"{f3(max(meds) - min(meds))} ms (SYSTEM.md §5: flat within ±0.2 ms).")
        w("")
    w("Per token (µs per row of batch×seq; stream: per call, median over the calls):")
    w("")
    rows = []
    for variant, _ in VARIANTS:
        for seq in d.seqs(variant):
            cells = [variant, seq_label(seq)]
            for lvl in LEVELS:
                r = d.svm_row(variant, lvl, seq)
                val = (r.get("median_us_per_token") if num(r.get("median_us_per_token")) else r.get("us_per_token")) if r else None
                tok = d.tokens(r, seq) if r else None
                if r and not num(val) and num(r.get("median_ms")) and tok:
                    val = r["median_ms"] * 1e3 / tok
                cells.append(f3(val))
            for base, _ in BASE_PEERS:
                b = d.best_peer(d.peer_rows(base, variant, seq), seq) or {}
                cells.append(f3(b.get("median_us_per_token") if num(b.get("median_us_per_token")) else b.get("us_per_token")))
            rows.append(cells)
    lines += table(["variant", "seq", "O0", "O1", "O2", "PyTorch eager", "TorchScript", "numpy"], rows,
                   ["---", "---"] + ["---:"] * 6)
    w("")
    w("ShapeVM run statistics (per run):")
    w("")
    rows = []
    for r in sorted(d.svm_workload, key=lambda r: (r.get("variant", ""), r.get("level", ""), seq_key(r.get("seq")))):
        rows.append([r.get("variant", "?"), r.get("level", "?"), seq_label(r.get("seq")), f3(r.get("p99_ms")),
                     r.get("runs", "—"), f3(r.get("allocs_per_run")), f3(r.get("system_allocs_per_run")),
                     f3(r.get("compiled_calls_per_run")), f3(r.get("interpreted_calls_per_run"))])
    lines += table(["variant", "level", "seq", "p99 ms", "runs", "alloc requests", "system allocs",
                    "compiled calls", "interpreted calls"], rows, ["---", "---", "---"] + ["---:"] * 6)
    w("")
    render_floor(d, lines)
    render_workload_jit(d, lines)
    w("<details><summary>Every peer row (all BLAS configurations)</summary>")
    w("")
    rows = []
    for r in sorted(d.peer_workload, key=lambda r: (r.get("variant", ""), seq_key(r.get("seq")), r.get("peer", ""))):
        rows.append([r.get("peer", "?"), r.get("blas", "?"), r.get("variant", "?"), seq_label(r.get("seq")),
                     frange(r.get("median_ms"), r.get("min_ms"), r.get("max_ms")),
                     f3(r.get("median_us_per_token") if num(r.get("median_us_per_token")) else r.get("us_per_token")),
                     r.get("runs", "—")])
    lines += table(["peer", "BLAS", "variant", "seq", "ms/call", "µs/token", "runs"], rows,
                   ["---", "---", "---", "---:", "---:", "---:", "---:"])
    w("")
    w("</details>")
    w("")

    # Cold -------------------------------------------------------------------------------------
    w("### Cold start and first-call costs (ms)")
    w("")
    rows = [[r.get("variant", "?"), r.get("level", "?"), f3(r.get("first_call_ms")), f3(r.get("first_after_new_shape_ms")),
             f3(r.get("p50_during_compile_ms")), f3(r.get("p99_during_compile_ms")), r.get("runs_during_compile", "—"),
             f3(r.get("p99_during_compile_over_o0_median")), f3(r.get("p50_o0_ms")), f3(r.get("p50_steady_ms"))]
            for r in section(d.svm, "cold")]
    lines += table(["ShapeVM variant", "level", "first call", "first after a new shape", "p50 while compiling",
                    "p99 while compiling", "runs while compiling", "p99 while compiling / O0 p50 (same seq)",
                    "O0 p50 (seq 20)", "p50 steady (seq 20)"], rows, ["---", "---"] + ["---:"] * 8)
    w("")
    rows = [[r.get("peer", "?"), r.get("variant", "?"), f3(r.get("script_ms")) if r.get("peer") == "torchscript" else "—",
             f3(r.get("first_call_ms")), f3(r.get("second_call_ms")), f3(r.get("first_after_new_shape_ms")),
             f3(r.get("first_at_third_shape_ms")), f3(r.get("p50_steady_ms"))]
            for r in section(d.peers, "cold")]
    lines += table(["peer (fresh process, shipped BLAS)", "variant", "torch.jit.script", "first call (seq 10)",
                    "second call", "first at seq 20", "first at seq 30", "p50 steady (seq 10)"], rows,
                   ["---", "---"] + ["---:"] * 6)
    w("")

    # Matmul -----------------------------------------------------------------------------------
    w("### Matmul (GFLOP/s, float32, 1 thread)")
    w("")
    svm_mm = {(r.get("m"), r.get("k"), r.get("n")): r for r in section(d.svm, "matmul")}
    peer_mm = section(d.peers, "matmul")
    shapes = list(dict.fromkeys([k for k in svm_mm] + [(r.get("m"), r.get("k"), r.get("n")) for r in peer_mm]))
    rows = []
    for shape in shapes:
        s = svm_mm.get(shape, {})
        best = {}
        for base in ("pytorch", "numpy"):
            cands = [r for r in peer_mm if (r.get("m"), r.get("k"), r.get("n")) == shape
                     and r.get("base_peer", r.get("peer")) == base and num(r.get("median_gflops"))]
            best[base] = max(cands, key=lambda r: r["median_gflops"]) if cands else None

        def gcell(r):
            if not r:
                return "—"
            tag = config_tag(r)
            return frange(r["median_gflops"], r.get("min_gflops"), r.get("max_gflops")) + (f" [{tag}]" if tag else "")
        jit = s.get("jit_gflops")
        tuned = s.get("auto_gflops")
        once = s.get("jit_packed_once_gflops")
        rows.append(["×".join(str(x) for x in shape), f3(jit), f3(tuned) if num(tuned) else "—",
                     f3(once) if num(once) else "—", f3(s.get("reference_gflops")),
                     f3(s.get("onednn_gflops")), gcell(best["pytorch"]), gcell(best["numpy"]), f3(s.get("peak_gflops")),
                     fratio(jit, s.get("onednn_gflops")), fratio(tuned, s.get("onednn_gflops")) if num(tuned) else "—",
                     fratio(jit, (best["pytorch"] or {}).get("median_gflops")),
                     fratio(jit, s.get("peak_gflops")), fratio(tuned, s.get("peak_gflops")) if num(tuned) else "—"])
    lines += table(["m×k×n", "ShapeVM JIT", "JIT tuned (O2)", "JIT, B packed once", "ShapeVM reference", "oneDNN",
                    "torch.matmul", "numpy @", "FMA peak", "JIT / oneDNN", "tuned / oneDNN", "JIT / PyTorch", "JIT / peak",
                    "tuned / peak"], rows)
    w("")
    w("\"ShapeVM JIT\" is the kernel with the family's default parameters, packing B on every call, as oneDNN's sgemm "
      "and matmul primitive do here. \"JIT tuned (O2)\" is the same with the parameters the AutoTuner chose for the shape "
      "(what a hot matmul runs at O2 once tuned; timed in the same interleaved rounds). \"B packed once\" is the "
      "default kernel reading the packing its cache kept from the first call: what a weight reused across calls (the "
      "loop's `x_t @ W_ih.T`) gets.")
    w("")
    two = [r for r in section(d.svm, "matmul") if num(r.get("jit_2t_gflops"))]
    if two:
        w("#### Matmul with 2 threads (GFLOP/s, float32; `kernel_threads` is 1 by default here)")
        w("")
        rows = []
        for r in two:
            one = r.get("jit_best_gflops")
            rows.append(["×".join(str(r.get(x)) for x in ("m", "k", "n")), f3(r["jit_2t_gflops"]),
                         f3(r.get("onednn_matmul_2t_gflops")), fratio(r["jit_2t_gflops"], r.get("onednn_matmul_2t_gflops")),
                         fratio(r["jit_2t_gflops"], one), fratio(r.get("onednn_matmul_2t_gflops"), r.get("onednn_matmul_gflops"))])
        lines += table(["m×k×n", "ShapeVM JIT, 2 threads", "oneDNN matmul, 2 threads", "JIT / oneDNN",
                        "JIT: 2 threads / 1 (same params)", "oneDNN: 2 threads / 1"], rows)
        w("")
        w("The exhaustive search's best parameters with `threads=2` (the kernel splits its output across two threads "
          "of ShapeVM's pool) against oneDNN's matmul primitive with two OpenMP threads, timed in the same rounds; "
          "both pack B per call.")
        w("")
    peer_labels = list(dict.fromkeys(r.get("peer") for r in peer_mm))
    if peer_labels:
        w("Every peer configuration (GFLOP/s, median):")
        w("")
        rows = []
        for shape in shapes:
            cells = ["×".join(str(x) for x in shape)]
            for label in peer_labels:
                r = next((r for r in peer_mm if r.get("peer") == label and (r.get("m"), r.get("k"), r.get("n")) == shape), None)
                cells.append(f3((r or {}).get("median_gflops")))
            rows.append(cells)
        lines += table(["m×k×n"] + [f"`{p}`" for p in peer_labels], rows)
        w("")

    bf16 = section(d.svm, "matmul_bf16")
    if bf16:
        w("#### bfloat16 matmul (GFLOP/s, bf16 inputs and output, float32 accumulation, 1 thread)")
        w("")
        rows = []
        for r in bf16:
            rows.append(["×".join(str(r.get(x)) for x in ("m", "k", "n")), f3(r.get("jit_gflops")),
                         "bf16 pairs" if r.get("bf16_pairs") else "widening", f3(r.get("jit_widening_gflops")),
                         f3(r.get("onednn_matmul_gflops")), fratio(r.get("jit_gflops"), r.get("jit_widening_gflops")),
                         fratio(r.get("jit_gflops"), r.get("onednn_matmul_gflops")),
                         fratio(r.get("jit_gflops"), r.get("f32_peak_gflops")),
                         f3(r.get("jit_packed_once_gflops") or None),
                         fratio(r.get("jit_packed_once_gflops") or None, r.get("onednn_matmul_gflops"))])
        lines += table(["m×k×n", "ShapeVM JIT", "kernel", "JIT widening to f32", "oneDNN bf16 matmul",
                        "JIT / widening", "JIT / oneDNN", "JIT / f32 FMA peak", "JIT, B packed once",
                        "B packed once / oneDNN"], rows)
        w("")
        w("\"ShapeVM JIT\" is the default kernel: with AVX512_BF16 it packs B as pairs of K rows and runs one "
          "`vdpbf16ps` per pair (two multiply-adds per lane); \"widening\" is the same tile converting both operands to "
          "float32 and using FMAs (`bf16dot=-1`). oneDNN is its matmul primitive on bf16 memory. B is packed on every "
          "call by all three; \"B packed once\" is the default kernel reading the packing its cache kept from the "
          "first call (a weight reused across calls), timed in the same rounds.")
        w("")

    render_tuning_quality(d, lines)

    # Elementwise ------------------------------------------------------------------------------
    w("### Elementwise and memory bandwidth (GB/s)")
    w("")
    w("Nominal traffic: 16 bytes per element for `sigmoid(a*b+c)` and `a*b+c` (three float32 reads, "
      "one write), 8 for memcpy (one read, one write); the memcpy figure is the roofline.")
    w("")
    peer_ew = section(d.peers, "elementwise")

    def peer_ew_best(op_prefix, peer=None):
        cands = [r for r in peer_ew if (r.get("op") or "").startswith(op_prefix) and num(r.get("gbps"))
                 and (peer is None or r.get("peer") == peer)]
        return max(cands, key=lambda r: r["gbps"]) if cands else None
    numpy_memcpy = next((r for r in peer_ew if r.get("op") == "memcpy" and r.get("peer") == "numpy"), None)
    rows = []
    for r in section(d.svm, "elementwise"):
        chain = r.get("chain", "sigmoid(a*b+c)")
        tchain = peer_ew_best("chain", "pytorch")
        taxpy = peer_ew_best("axpy", "pytorch")
        # chain_o2_gbps: the fused region (one pass); chain_gbps: O1, one kernel per op.
        rows.append([chain, r.get("n", "?"), f3(r.get("chain_o2_gbps")), f3(r.get("chain_gbps")),
                     f3(r.get("chain_o0_gbps")), f3(r.get("axpy_gbps")), f3(r.get("memcpy_gbps")),
                     fratio(r.get("chain_o2_gbps"), r.get("axpy_gbps")), fratio(r.get("chain_gbps"), r.get("axpy_gbps")),
                     fratio(r.get("chain_o2_gbps"), (tchain or {}).get("gbps")),
                     fratio(r.get("axpy_gbps"), (taxpy or {}).get("gbps")),
                     fratio(r.get("memcpy_gbps"), (numpy_memcpy or {}).get("gbps"))])
    lines += table(["ShapeVM chain", "n", "O2 (fused)", "O1 (op by op)", "O0", "a*b+c (one-pass JIT kernel)", "memcpy",
                    "O2 / a*b+c roofline", "O1 / a*b+c roofline", "O2 / PyTorch best", "a*b+c / PyTorch best",
                    "memcpy / numpy memcpy"], rows,
                   ["---", "---:"] + ["---:"] * 10)
    w("")
    rows = [[r.get("peer", "?"), f"`{r.get('chain', r.get('op'))}`", r.get("n", "?"),
             frange(r.get("gbps"), r.get("min_gbps"), r.get("max_gbps")), f3(r.get("gflops")),
             fratio(r.get("gbps"), (numpy_memcpy or {}).get("gbps")) if r.get("op") != "memcpy" else "—"]
            for r in peer_ew]
    lines += table(["peer", "op", "n", "GB/s", "GFLOP/s", "/ numpy memcpy"], rows,
                   ["---", "---", "---:", "---:", "---:", "---:"])
    svm_n = {r.get("n") for r in section(d.svm, "elementwise")}
    peer_n = {r.get("n") for r in peer_ew}
    if svm_n and peer_n and svm_n != peer_n:
        w("")
        w(f"Note: ShapeVM measured n = {sorted(svm_n)}, the peers n = {sorted(peer_n)}: the ratios compare different sizes.")
    w("")
    w("GFLOP/s counts 2 flops per element for `a*b+c` and 6 for `sigmoid(a*b+c)` (mul, add, neg, exp, add, "
      "divide; exp as one). Idiomatic forms allocate their result; `out=` forms write a preallocated buffer "
      "(PyTorch: `torch.addcmul(c, a, b, out=y)` then `torch.sigmoid(y, out=y)`; numpy: one ufunc per step with `out=`).")
    w("")

    # Overhead ---------------------------------------------------------------------------------
    w("### Per-op overhead (ns per op, 1-element float32)")
    w("")
    peer_oh = section(d.peers, "overhead")
    rows = []
    svm_oh = section(d.svm, "overhead")
    for s in svm_oh or [{}]:
        for p in peer_oh or [{}]:
            if not s and not p:
                continue
            rows.append([s.get("what", "—"), f3(s.get("ns")), f"`{p.get('what', '—')}`",
                         frange(p.get("ns"), p.get("min_ns"), p.get("max_ns")), fratio(s.get("ns"), p.get("ns")),
                         f"1/{p['ns'] / s['ns']:.0f}" if num(s.get("ns")) and num(p.get("ns")) and s["ns"] > 0 else "—"])
    lines += table(["ShapeVM", "ns", "PyTorch eager", "ns", "ratio", "as a fraction"], rows,
                   ["---", "---:", "---", "---:", "---:", "---:"])
    w("")
    w("Target (SYSTEM.md): at most 1/20 of PyTorch eager's per-op time.")
    w("")

    # Compile ----------------------------------------------------------------------------------
    w("### Compile latency (ms)")
    w("")
    c = d.svm.get("compile") if isinstance(d.svm.get("compile"), dict) else None
    rows = []
    if c:
        rows.append([c.get("count", "—"), f3(c.get("median_ms")), f3(c.get("p90_ms")), f3(c.get("shape_infer_ms")),
                     f3(c.get("codegen_ms")), f3(c.get("validate_patch_ms"))])
    lines += table(["compiles", "median end to end", "p90", "shape inference", "search + codegen",
                    "validation + patch"], rows, ["---:"] * 6)
    w("")
    w("O1 kernels (one per op); means of the split. SYSTEM.md §5 figures to beat: 42 ms end to end (8 shape "
      "inference, 22 search + codegen, 12 validation + patch); 15–45 ms for the bytecode approach.")
    w("")
    render_compile_latency(d, lines)

    # Memory -----------------------------------------------------------------------------------
    w("### Memory")
    w("")
    rows = [[r.get("module", "?"), fbytes(r.get("context_bytes")), r.get("kernels", "—"), fbytes(r.get("llvm_code_bytes")),
             fbytes(r.get("jit_heap_bytes"))]
            for r in section(d.svm, "memory")]
    lines += table(["module", "VM context", "JIT kernels", "JIT resident (LLVM code and data)", "JIT heap"], rows)
    w("")
    w("Target (SYSTEM.md §5): VM context under 2 MB.")
    w("")

    # Plots ------------------------------------------------------------------------------------
    w("### Plots")
    w("")
    captions = {"latency": "Latency per call vs seq (log scale), ShapeVM levels and peers",
                "matmul": "Matmul GFLOP/s per shape: ShapeVM JIT vs reference, oneDNN, PyTorch, numpy and the FMA peak",
                "elementwise": "Elementwise GB/s vs memcpy",
                "timeline": "Warm-up timeline: interpreter thread vs compile thread"}
    for key, fname in PLOTS.items():
        if plots is None or fname in plots:
            w(f"![{captions[key]}]({image_prefix}{fname})")
            w("")
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------------------------
# Markdown sections for the O2 figures: compute floor, tuning, compile latency by part.

def fx(v):
    """A ratio as '1.23×', or '—'."""
    return f"{f3(v)}×" if num(v) else "—"


def render_floor(d, lines):
    w = lines.append
    w("#### O2 vs its compute floor and vs O0")
    w("")
    rows = []
    peaks = []
    for variant, _ in VARIANTS:
        for seq in sorted({r.get("seq") for r in d.svm_workload if r.get("variant") == variant}, key=seq_key):
            o2 = d.svm_row(variant, "O2", seq)
            o0 = d.svm_row(variant, "O0", seq)
            if not o2:
                continue
            stream = seq == "stream"
            unit = "µs/token" if stream else "ms"
            floor = o2.get("floor_us_per_token" if stream else "floor_ms")
            med = d.metric(o2, seq)[0]
            if num(o2.get("peak_gflops")):
                peaks.append(o2["peak_gflops"])
            ratio = o2.get("vs_floor") if num(o2.get("vs_floor")) else (med / floor if num(med) and num(floor) and floor else None)
            speedup = o2.get("speedup_vs_o0")
            if not num(speedup) and o0:
                speedup = (d.metric(o0, seq)[0] / med) if num(d.metric(o0, seq)[0]) and num(med) and med else None
            target = "—" if not num(ratio) else ("ok" if ratio <= 1.25 else "**above**")
            rows.append([variant, seq_label(seq) + (" (µs/token)" if stream else ""),
                         f3((o2.get("gflop_per_token") or 0) * 1e3) + " MFLOP/token" if stream else f3(o2.get("gflop_per_call")),
                         f3(floor), f3(med), fx(ratio), target, f3(o2.get("gflops")), fx(speedup),
                         f3((o0 or {}).get("allocs_per_run")), f3(o2.get("allocs_per_run")),
                         f3((o0 or {}).get("system_allocs_per_run")), f3(o2.get("system_allocs_per_run"))])
    lines += table(["variant", "seq", "GFLOP per call", "floor", "O2", "O2 / floor", "≤ 1.25×", "O2 GFLOP/s",
                    "O2 speedup vs O0", "allocs/run O0", "allocs/run O2", "system allocs/run O0", "system allocs/run O2"],
                   rows, ["---", "---"] + ["---:"] * 11)
    w("")
    peak = max(peaks) if peaks else None
    w("Floor = the call's matmul FLOPs / the FMA peak measured in the same process during the same rounds"
      + (f" ({f3(peak)} GFLOP/s, one core)" if num(peak) else "") + ": the cell counts 2·B·S·128·1024 + 2·B·256·1024, "
      "the loop (2·B·128·1024 + 2·B·256·1024) per step × seq; the elementwise tail (~4.4 kFLOP per row of batch×seq, "
      "under 2% of the matmuls) is not counted, so the floor is slightly optimistic. Floor and O2 in ms per call "
      "(stream: µs per token, the floor averaged over the stream). Target (O2 issue): O2 ≤ 1.25× the floor. "
      "Allocation requests and system allocations are per run, over the timed runs.")
    w("")
    two = [r for r in section(d.svm, "workload_2t") if num(r.get("median_ms"))]
    if two:
        w("#### O2 with 2 kernel threads (`kernel_threads=2`; 1 is the default on this 2-vCPU machine)")
        w("")
        rows = []
        for r in sorted(two, key=lambda r: (r.get("variant", ""), seq_key(r.get("seq")))):
            rows.append([r.get("variant", "?"), seq_label(r.get("seq")), f3(r.get("floor_ms")),
                         frange(r.get("median_ms"), r.get("min_ms"), r.get("max_ms")), f3(r.get("one_thread_ms")),
                         fx(r.get("speedup_vs_one_thread")), fx(r.get("vs_floor")), fx(r.get("vs_two_core_floor"))])
        lines += table(["variant", "seq", "one-core floor", "O2, 2 threads", "O2, 1 thread", "2 threads / 1",
                        "/ one-core floor", "/ two-core floor"], rows, ["---", "---"] + ["---:"] * 6)
        w("")
        w("The same O2 instance, its kernels tuned on one thread, timed again in the same rounds with the "
          "`kernel_threads` tunable at 2 (matmuls split their output across ShapeVM's pool; fused kernels their rows). "
          "The one-core floor is the table above's; a two-core floor is half of it.")
        w("")


def render_workload_jit(d, lines):
    w = lines.append
    stats = section(d.svm, "workload_jit")
    if not stats:
        return
    w("ShapeVM JIT during the warm-up (O2: an AutoTuner on a fresh tuning database, the warm-up runs until every "
      "installed fused region has been re-tuned; `database` = a second VM + JIT in the same process with a new "
      "AutoTuner reading the database the first wrote):")
    w("")
    rows = []
    for r in stats:
        rows.append([r.get("variant", "?"), r.get("level", "?"), r.get("role") or "—", r.get("compiles", "—"),
                     r.get("fused_regions", "—"), r.get("fused_ops", "—"), f3(r.get("tuning_ms")),
                     r.get("tuned_kernels", "—"), r.get("tuning_cache_hits", "—"), r.get("region_declines", "—"),
                     f3(r.get("warmup_s")), r.get("untuned_ranges", "—"), r.get("tune_budget_ms", "—")])
    lines += table(["variant", "level", "instance", "compiles", "fused regions", "fused ops", "tuning ms",
                    "kernels tuned by timing", "tuning-database hits", "region declines", "warm-up s",
                    "ranges left untuned", "tuning budget ms/kernel"], rows, ["---", "---", "---"] + ["---:"] * 10)
    w("")


def render_compile_latency(d, lines):
    w = lines.append
    cats = section(d.svm, "compile_latency")
    w("Compile latency per hot path (one compile event each; both workload variants), median / p90 of each part (ms):")
    w("")

    def mp(r, part):
        return f"{f3(r.get(part + '_median_ms'))} / {f3(r.get(part + '_p90_ms'))}"
    rows = [[r.get("category", "?") + (" ¹" if r.get("region") else ""), r.get("count", "—"), mp(r, "total"), mp(r, "shape_infer"),
             mp(r, "codegen"), mp(r, "tuning"), mp(r, "validate_patch")]
            for r in cats]
    lines += table(["kind", "events", "end to end", "shape inference", "codegen", "tuning", "validation + patch"],
                   rows, ["---"] + ["---:"] * 6)
    w("")
    if any(r.get("region") for r in cats):
        w("¹ Fused regions: shape inference = the region's plan (shape inference of every op plus fusion planning); "
          "validation + patch = the rest of the compile thread's span besides plan, codegen and tuning (mainly "
          "validating the region against the interpreter). An untuned install comes first; the region's re-tune "
          "(AutoTuner, then codegen and validation of the winners) runs later in the background while the untuned "
          "region serves.")
        w("")
    paths = section(d.svm, "compile_paths")
    if paths:
        w("Tuning cold vs tuning-database hit, per fused hot path (first event of each kind; ms):")
        w("")
        rows = []
        for r in paths:
            cold_t, hit_t = r.get("cold_retune_tuning_ms"), r.get("db_retune_tuning_ms")
            rows.append([r.get("variant", "?"), f"`{r.get('path', '?')}`", f3(r.get("cold_install_total_ms")),
                         f3(cold_t), f3(r.get("cold_retune_total_ms")),
                         f3(hit_t) + ("" if r.get("db_retune_cache_hit", True) else " (miss)"),
                         f3(r.get("db_retune_total_ms")),
                         fx(cold_t / hit_t) if num(cold_t) and num(hit_t) and hit_t > 0 else "—"])
        lines += table(["variant", "hot path", "untuned install", "cold: tuning", "cold: re-tune end to end",
                        "database hit: tuning", "database hit: re-tune end to end", "tuning cold / hit"], rows,
                       ["---", "---"] + ["---:"] * 6)
        w("")


def render_tuning_quality(d, lines):
    w = lines.append
    mm = [r for r in section(d.svm, "matmul") if num(r.get("auto_gflops")) or num(r.get("jit_best_gflops"))]
    w("#### Tuning quality: the AutoTuner vs exhaustive search (GFLOP/s, 1 thread)")
    w("")
    rows = []
    for r in mm:
        rows.append(["×".join(str(r.get(k, "?")) for k in ("m", "k", "n")), r.get("candidates", "—"), f3(r.get("tune_s")),
                     f3(r.get("jit_best_gflops")) + (f" `{r['jit_best_params']}`" if r.get("jit_best_params") else ""),
                     f3(r.get("auto_budget_ms")), f"{r.get('auto_timed', '—')} of {r.get('auto_candidates', '—')}",
                     f3((r.get("auto_tuning_ms") or 0) / 1e3) if num(r.get("auto_tuning_ms")) else "—",
                     f3(r.get("auto_gflops")) + (f" `{r['auto_params']}`" if r.get("auto_params") else ""),
                     f3(r.get("jit_gflops")), fratio(r.get("auto_gflops"), r.get("jit_best_gflops")),
                     fratio(r.get("auto_gflops"), r.get("jit_gflops"))])
    lines += table(["m×k×n", "exhaustive: candidates", "exhaustive: s", "exhaustive best [params]", "AutoTuner budget ms",
                    "AutoTuner: timed", "AutoTuner: s", "AutoTuner's choice [params]", "default params",
                    "choice / best", "choice / default"], rows, ["---"] + ["---:"] * 10)
    w("")
    w("Exhaustive = every candidate of the matmul family's search space compiled, checked and timed here. AutoTuner = "
      "`tune::AutoTuner` as O2 runs it (default budget `TuneBudgetMs`, default repeats and sample length) on the same "
      "spec, one fresh tuning database for the suite (its predictor may try earlier shapes' winners first). All three "
      "kernels are then timed side by side in the same interleaved rounds (a choice / best above 1: the "
      "exhaustive pick, timed once in a short burst per candidate, lost to the AutoTuner's in those rounds — noise "
      "between near-equal candidates).")
    w("")


# --------------------------------------------------------------------------------------------
# Plots.

def _placeholder(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=12, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def make_plots(svm, peers, out_dir):
    """Writes the PNGs into out_dir; returns their file names. Missing data gives a plot that
    says 'not measured yet' (so the markdown's image links always resolve)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = Data(svm, peers, None)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    level_style = {"O0": ("tab:red", "o"), "O1": ("tab:orange", "s"), "O2": ("tab:green", "D")}
    peer_style = {"pytorch": "--", "torchscript": "-.", "numpy": ":"}
    config_colors = ["tab:blue", "tab:purple", "tab:brown", "tab:gray", "tab:olive", "tab:cyan"]
    configs = list(dict.fromkeys(r.get("config") or "shipped" for r in d.peer_workload))

    # (a) latency vs seq.
    fig, axes = plt.subplots(1, 2, figsize=(15, 5.2))
    legend = {}
    for ax, (variant, title) in zip(axes, VARIANTS):
        drew = False
        xs_seen = set()
        for lvl in LEVELS:
            pts = sorted((r["seq"], r) for r in d.svm_workload if r.get("variant") == variant and r.get("level") == lvl
                         and isinstance(r.get("seq"), int) and num(r.get("median_ms")))
            if pts:
                xs = [p[0] for p in pts]
                ys = [p[1]["median_ms"] for p in pts]
                lo = [y - p[1].get("min_ms", y) for y, p in zip(ys, pts)]
                hi = [p[1].get("max_ms", y) - y for y, p in zip(ys, pts)]
                color, marker = level_style[lvl]
                ax.errorbar(xs, ys, yerr=[lo, hi], color=color, marker=marker, lw=2.2, capsize=3, label=f"ShapeVM {lvl}")
                xs_seen.update(xs)
                drew = True
        for base, name in BASE_PEERS:
            for ci, cfg in enumerate(configs):
                pts = sorted((r["seq"], r) for r in d.peer_workload if r.get("variant") == variant
                             and r.get("base_peer") == base and (r.get("config") or "shipped") == cfg
                             and isinstance(r.get("seq"), int) and num(r.get("median_ms")))
                if not pts:
                    continue
                xs = [p[0] for p in pts]
                ys = [p[1]["median_ms"] for p in pts]
                lo = [y - p[1].get("min_ms", y) for y, p in zip(ys, pts)]
                hi = [p[1].get("max_ms", y) - y for y, p in zip(ys, pts)]
                tag = config_tag(pts[0][1])
                ax.errorbar(xs, ys, yerr=[lo, hi], color=config_colors[ci % len(config_colors)], ls=peer_style[base],
                            marker=".", lw=1.2, capsize=2, alpha=0.85, label=name + (f" [{tag}]" if tag else ""))
                xs_seen.update(xs)
                drew = True
        ax.set_title(title.replace("`", ""))
        if drew:
            ax.set_xlabel("seq (batch 32)")
            ax.set_ylabel("ms per call (median, min–max)")
            ax.set_yscale("log")
            if xs_seen and max(xs_seen) >= 8 * min(xs_seen):
                ax.set_xscale("log")
            ticks = sorted(xs_seen)
            ax.set_xticks(ticks)
            ax.set_xticklabels([str(t) for t in ticks])
            ax.grid(True, which="both", alpha=0.3)
            for handle, label in zip(*ax.get_legend_handles_labels()):
                legend.setdefault(label, handle)
        else:
            _placeholder(ax, NOT_MEASURED)
    if legend:
        fig.legend(list(legend.values()), list(legend.keys()), loc="center right", fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0, 0.8, 1))
    else:
        fig.tight_layout()
    fig.savefig(out_dir / PLOTS["latency"], dpi=110)
    plt.close(fig)
    written.append(PLOTS["latency"])

    # (b) matmul GFLOP/s.
    svm_mm = {(r.get("m"), r.get("k"), r.get("n")): r for r in section(d.svm, "matmul")}
    peer_mm = section(d.peers, "matmul")
    shapes = list(dict.fromkeys(list(svm_mm) + [(r.get("m"), r.get("k"), r.get("n")) for r in peer_mm]))
    fig, ax = plt.subplots(figsize=(13, 5))
    if shapes:
        series = [("ShapeVM JIT", lambda s: svm_mm.get(s, {}).get("jit_gflops"), "tab:green"),
                  ("ShapeVM reference", lambda s: svm_mm.get(s, {}).get("reference_gflops"), "tab:olive"),
                  ("oneDNN", lambda s: svm_mm.get(s, {}).get("onednn_gflops"), "tab:orange")]
        peer_labels = list(dict.fromkeys(r.get("peer") for r in peer_mm if r.get("base_peer") == "pytorch"))
        for i, label in enumerate(peer_labels):
            series.append((f"torch.matmul {label.replace('pytorch', '').lstrip('+') or 'shipped BLAS'}",
                           lambda s, label=label: next((r.get("median_gflops") for r in peer_mm if r.get("peer") == label
                                                        and (r.get("m"), r.get("k"), r.get("n")) == s), None),
                           config_colors[i % len(config_colors)]))
        numpy_labels = [r.get("peer") for r in peer_mm if r.get("base_peer") == "numpy"]
        if numpy_labels:
            series.append(("numpy @ (best BLAS)", lambda s: max([r["median_gflops"] for r in peer_mm if r.get("base_peer") == "numpy"
                                                                  and (r.get("m"), r.get("k"), r.get("n")) == s
                                                                  and num(r.get("median_gflops"))] or [None],
                                                                 key=lambda v: -1 if v is None else v), "tab:pink"))
        series = [s for s in series if any(num(s[1](shape)) for shape in shapes)]
        width = 0.8 / max(1, len(series))
        for i, (name, get, color) in enumerate(series):
            xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(shapes))]
            ys = [get(s) if num(get(s)) else 0 for s in shapes]
            ax.bar(xs, ys, width, label=name, color=color)
        peaks = [svm_mm.get(s, {}).get("peak_gflops") for s in shapes]
        if any(num(p) for p in peaks):
            for j, p in enumerate(peaks):
                if num(p):
                    ax.hlines(p, j - 0.45, j + 0.45, colors="black", linestyles="--", lw=1.2,
                              label="FMA peak" if j == next(i for i, q in enumerate(peaks) if num(q)) else None)
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(["×".join(str(x) for x in s) for s in shapes], fontsize=8)
        ax.set_ylabel("GFLOP/s (median), 1 thread")
        ax.set_title("Matmul float32")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    else:
        _placeholder(ax, NOT_MEASURED)
    fig.tight_layout()
    fig.savefig(out_dir / PLOTS["matmul"], dpi=110)
    plt.close(fig)
    written.append(PLOTS["matmul"])

    # Elementwise GB/s.
    fig, ax = plt.subplots(figsize=(10, 4.5))
    bars = []
    for r in section(d.svm, "elementwise"):
        chain = r.get("chain", "chain")
        for key, name in (("chain_o2_gbps", f"O2 {chain}"), ("chain_gbps", f"O1 {chain}"), ("axpy_gbps", "a*b+c"),
                          ("memcpy_gbps", "memcpy")):
            if num(r.get(key)):
                bars.append((f"ShapeVM\n{name}", r[key], "tab:green"))
    for r in section(d.peers, "elementwise"):
        if num(r.get("gbps")):
            bars.append((f"{r.get('peer')}\n{r.get('chain', r.get('op'))}", r["gbps"],
                         "tab:blue" if r.get("peer") == "pytorch" else "tab:pink"))
    if bars:
        ax.bar(range(len(bars)), [b[1] for b in bars], color=[b[2] for b in bars])
        ax.set_xticks(range(len(bars)))
        ax.set_xticklabels([b[0] for b in bars], fontsize=6, rotation=60, ha="right")
        ax.set_ylabel("GB/s (nominal traffic)")
        ax.set_title("Elementwise float32 vs memcpy")
        ax.grid(True, axis="y", alpha=0.3)
    else:
        _placeholder(ax, NOT_MEASURED)
    fig.tight_layout()
    fig.savefig(out_dir / PLOTS["elementwise"], dpi=110)
    plt.close(fig)
    written.append(PLOTS["elementwise"])

    # (c) timeline.
    events = [e for e in section(d.svm, "timeline") if num(e.get("start_ms")) and num(e.get("dur_ms"))]
    threads = list(dict.fromkeys(e.get("thread", "?") for e in events))
    fig, ax = plt.subplots(figsize=(13, 1.2 + 0.7 * max(2, len(threads))))
    if events:
        palette = {"interpreter": "tab:blue", "compile": "tab:orange"}
        end = max(e["start_ms"] + e["dur_ms"] for e in events)
        for y, thread in enumerate(threads):
            evs = [e for e in events if e.get("thread", "?") == thread]
            color = palette.get(thread, config_colors[y % len(config_colors)])
            ax.broken_barh([(e["start_ms"], max(e["dur_ms"], end * 1e-4)) for e in evs], (y - 0.35, 0.7),
                           facecolors=color, edgecolors="white", linewidth=0.3)
            for e in evs:
                if e["dur_ms"] > end * 0.04:
                    ax.text(e["start_ms"] + e["dur_ms"] / 2, y, str(e.get("name", ""))[:14], ha="center", va="center",
                            fontsize=6, color="white")
        ax.set_yticks(range(len(threads)))
        ax.set_yticklabels(threads)
        ax.set_xlabel("ms since the first run")
        ax.set_title("Warm-up: interpreter vs compile thread")
        ax.grid(True, axis="x", alpha=0.3)
    else:
        _placeholder(ax, "timeline " + NOT_MEASURED)
    fig.tight_layout()
    fig.savefig(out_dir / PLOTS["timeline"], dpi=110)
    plt.close(fig)
    written.append(PLOTS["timeline"])
    return written


# --------------------------------------------------------------------------------------------
# BENCHMARKS.md.

def splice(text, generated):
    """`text` with the part between the bench markers replaced by `generated` (the markers are
    appended at the end when absent); everything outside the markers is kept byte for byte."""
    block = f"{BEGIN}\n{generated.rstrip()}\n{END}"
    b = text.find(BEGIN)
    e = text.find(END, b + len(BEGIN)) if b >= 0 else -1
    if b >= 0 and e >= 0:
        return text[:b] + block + text[e + len(END):]
    if b >= 0 or text.find(END) >= 0:
        raise ValueError(f"BENCHMARKS.md has one of {BEGIN} / {END} without the other (or in the wrong order)")
    if not text:
        return block + "\n"
    sep = "" if text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    return text + sep + block + "\n"


def build(out_dir, command, image_prefix="", md_path=None, plot_dir=None):
    """Reads out_dir's JSON files, writes the plots (into plot_dir, default out_dir) and returns
    the markdown (also written to md_path when given)."""
    out_dir = Path(out_dir)
    svm = load_json(out_dir / "shapevm.json")
    peers = load_json(out_dir / "peers.json")
    gate = load_json(out_dir / "gate.json")
    plots = make_plots(svm, peers, plot_dir or out_dir)
    md = render(svm, peers, gate, command=command, image_prefix=image_prefix, plots=plots)
    if md_path:
        Path(md_path).write_text(md)
    return md


def main(argv=None):
    parser = argparse.ArgumentParser(description="Benchmark report: markdown and PNG plots from the JSON results")
    parser.add_argument("--dir", default=str(ROOT / "build" / "bench-out"),
                        help="directory with shapevm.json, peers.json, gate.json (plots go here too)")
    parser.add_argument("--md", default=None, help="write the markdown here (default: stdout)")
    parser.add_argument("--image-prefix", default=None,
                        help="prefix of the image links (default: the plot dir relative to the markdown file)")
    parser.add_argument("--command", default="/usr/bin/python3 bench/run_all.py", help="command shown in the report")
    args = parser.parse_args(argv)
    prefix = args.image_prefix
    if prefix is None:
        if args.md:
            try:
                prefix = str(Path(args.dir).resolve().relative_to(Path(args.md).resolve().parent)) + "/"
            except ValueError:
                prefix = str(Path(args.dir).resolve()) + "/"
        else:
            prefix = ""
    md = build(args.dir, args.command, prefix, args.md)
    if not args.md:
        sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
