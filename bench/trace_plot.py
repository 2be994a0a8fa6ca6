#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Renders a `shapevm run --trace` file (Chrome Trace Event Format JSON) as a PNG timeline for
# reports: one lane per thread (interpreter, compile threads), a bar per complete event coloured
# by category (runs, ops, compiled regions, compile phases, tuning candidates), ticks for instant
# events (guard misses, declines, compile queued/install). Nested events are drawn as thinner bars
# inside their parent, so a run's aggregated ops and a compile's phases stay visible.
#
#   /usr/bin/python3 bench/trace_plot.py trace.json -o timeline.png [--title TEXT] [--width 10]
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLORS = {
    "run": "#4c72b0",
    "op": "#a6bddb",
    "region": "#55a868",
    "compile": "#f2d0b4",
    "tune": "#c44e52",
    "jit": "#8172b2",
    "fallback": "#937860",
}
# Compile phases by name (a compile's span holds them).
PHASE_COLORS = {
    "queued": "#cccccc",
    "shape inference": "#ccb974",
    "codegen": "#dd8452",
    "tuning": "#c44e52",
    "validation": "#8172b2",
}
LABELS = {
    "run": "function run",
    "op": "op (interpreted or per-op kernel)",
    "region": "compiled region",
    "compile": "compile",
    "tune": "tuning candidate",
}


def color(event):
    if event.get("cat") == "compile":
        for prefix, value in PHASE_COLORS.items():
            if event["name"].startswith(prefix):
                return value
    return COLORS.get(event.get("cat"), "#999999")


def load(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return events, names


def depths(spans):
    """Nesting depth of each (start, end) span on one thread."""
    out, stack = [], []
    for start, end, index in sorted(spans, key=lambda s: (s[0], -s[1])):
        while stack and stack[-1] <= start:
            stack.pop()
        out.append((index, len(stack)))
        stack.append(end)
    return dict(out)


def plot(events, names, output, title=None, width=10.0):
    timed = [e for e in events if e.get("ph") in ("X", "i")]
    if not timed:
        raise SystemExit("trace_plot: the trace has no timed events")
    origin = min(e["ts"] for e in timed)
    # Interpreter lanes first, then compile threads, each in tid order.
    tids = sorted({e["tid"] for e in timed}, key=lambda t: (not names.get(t, "").startswith("interpreter"), t))
    lane = {tid: i for i, tid in enumerate(tids)}
    fig, ax = plt.subplots(figsize=(width, 1.6 + 0.8 * len(tids)), dpi=100)
    for tid in tids:
        complete = [(e["ts"], e["ts"] + e["dur"], i) for i, e in enumerate(events)
                    if e.get("ph") == "X" and e["tid"] == tid]
        level = depths(complete)
        for start, end, index in sorted(complete, key=lambda s: level[s[2]]):  # parents under children
            e = events[index]
            depth = min(level[index], 3)
            height = 0.7 * (0.75 ** depth)
            ax.barh(lane[tid], (end - start) / 1e3, left=(start - origin) / 1e3, height=height,
                    color=color(e), edgecolor="none")
        for e in events:
            if e.get("ph") == "i" and e["tid"] == tid:
                x = (e["ts"] - origin) / 1e3
                ax.plot([x, x], [lane[tid] - 0.42, lane[tid] + 0.42], color=COLORS.get(e.get("cat"), "black"),
                        linewidth=0.8)
    ax.set_yticks(range(len(tids)))
    ax.set_yticklabels([names.get(t, f"thread {t}") for t in tids])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_xlim(left=0)
    if title:
        ax.set_title(title, fontsize=10)
    used = {e.get("cat") for e in timed if e.get("ph") == "X"}
    phases = {p for e in timed if e.get("ph") == "X" and e.get("cat") == "compile" for p in PHASE_COLORS
              if e["name"].startswith(p)}
    handles = [Patch(color=COLORS[c], label=LABELS[c]) for c in LABELS if c in used]
    handles += [Patch(color=PHASE_COLORS[p], label=p) for p in PHASE_COLORS if p in phases]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.28), fontsize=7, ncol=5, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(output)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Render a shapevm --trace file as a PNG timeline")
    parser.add_argument("trace", help="the Chrome Trace Event Format JSON file")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("--title", default=None)
    parser.add_argument("--width", type=float, default=10.0, help="figure width in inches (100 dpi)")
    args = parser.parse_args(argv)
    try:
        events, names = load(args.trace)
    except (OSError, ValueError, KeyError) as err:
        print(f"trace_plot: cannot read {args.trace}: {err}", file=sys.stderr)
        return 1
    plot(events, names, args.output, args.title, args.width)
    return 0


if __name__ == "__main__":
    sys.exit(main())
