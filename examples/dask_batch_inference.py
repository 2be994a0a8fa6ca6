# SPDX-License-Identifier: Apache-2.0
# Variable-length batch inference on Dask (issue 26, docs/scale-out.md): a corpus of sequences with
# lengths drawn from 8-512, batched by a length-bucketing sampler, run through the reference LSTM
# cell (examples/lstm_cell.py) on LocalClusters of worker processes: cold (an empty cache) and warm
# (a fresh cluster that starts from the archive the first cold run exported, meeting the batches
# in another order), on W workers and on one, interleaved, --repeats times. It prints throughput
# (sequence steps per second, padding included), the time until the cluster reaches its steady
# throughput, each worker's time to its first compiled call, compiles and cache hits, and the
# medians over the repeats.
# Usage: PYTHONPATH=build/python /usr/bin/python3 examples/dask_batch_inference.py [--sequences N]
#        [--workers W] [--batch B] [--repeats R] [--json OUT.json]
import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import shapevm
import shapevm.dask as svd
from distributed import Client, LocalCluster

HERE = Path(__file__).resolve().parent
MODEL = str(HERE / "lstm_cell.py")
BUCKET = 32  # sequence lengths are padded up to a multiple of this: few shapes, little padding


def corpus(n, rng):
    return [rng.standard_normal((int(length), 128)).astype(np.float32) * 0.5
            for length in rng.integers(8, 513, size=n)]


def bucketed_batches(sequences, batch, rng):
    """Length-bucketing sampler: sequences of one padded length, `batch` at a time (the last batch
    of a bucket may be smaller), the batches in random order."""
    buckets = {}
    for seq in sequences:
        buckets.setdefault(-(-len(seq) // BUCKET) * BUCKET, []).append(seq)
    items = []
    for length in sorted(buckets, reverse=True):
        group = buckets[length]
        for i in range(0, len(group), batch):
            chunk = group[i:i + batch]
            x = np.zeros((len(chunk), length, 128), np.float32)
            for row, seq in enumerate(chunk):
                x[row, :len(seq)] = seq
            items.append({"x": x, "h": np.zeros((len(chunk), 256), np.float32),
                          "c": np.zeros((len(chunk), 256), np.float32)})
    order = rng.permutation(len(items))
    return [items[i] for i in order]


def run(items, params, workers, cache_dir=None, archive=None, rounds=8):
    """Runs `items` in `rounds` slices on a fresh cluster; per-round seconds and cluster stats."""
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                           silence_logs=logging.ERROR)
    client = Client(cluster)
    try:
        client.wait_for_workers(workers)
        times = []
        per_round = -(-len(items) // rounds)
        for r in range(rounds):
            part = items[r * per_round:(r + 1) * per_round]
            if not part:
                break
            start = time.perf_counter()
            svd.map_model(client, MODEL, part, fn="lstm_cell", params=params, cache_dir=cache_dir,
                          cache_archive=archive)
            times.append((time.perf_counter() - start, sum(it["x"].shape[0] * it["x"].shape[1] for it in part)))
        return times, svd.cluster_stats(client)
    finally:
        client.close()
        cluster.close()


def summary(name, times, stats):
    total_s = sum(t for t, _ in times)
    tokens = sum(n for _, n in times)  # sequence steps, padding included
    rates = [n / t for t, n in times]
    steady = statistics.median(rates[len(rates) // 2:])
    # Time to steady throughput: until the first round within 80% of the steady rate.
    until = 0.0
    for (t, n), rate in zip(times, rates):
        until += t
        if rate >= 0.8 * steady:
            break
    per_worker = {addr: {k: w[k] for k in ("compiles", "cache_hits", "runs", "loads", "to_first_compiled_s")}
                  for addr, w in stats["workers"].items()}
    firsts = [w["to_first_compiled_s"] for w in per_worker.values() if w["to_first_compiled_s"] is not None]
    first = max(firsts) if firsts else float("nan")  # the slowest worker's
    print(f"{name}: {tokens} steps in {total_s:.1f} s ({tokens / total_s:.0f} steps/s), steady "
          f"{steady:.0f} steps/s, reached after {until:.1f} s; first compiled call after {first:.2f} s (slowest "
          f"worker); compiles {stats['compiles']}, cache hits {stats['cache_hits']}")
    for addr, w in per_worker.items():
        print(f"  {addr}: {w}")
    return {"seconds": total_s, "steps": tokens, "steps_per_s": tokens / total_s, "steady_steps_per_s": steady,
            "to_steady_s": until, "to_first_compiled_s": first, "compiles": stats["compiles"],
            "cache_hits": stats["cache_hits"], "workers": per_worker}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sequences", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1, help="interleaved repeats of the four runs")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(shapevm.__file__).resolve().parents[1]),
                                                os.environ.get("PYTHONPATH", "")])
    rng = np.random.default_rng(args.seed)
    items = bucketed_batches(corpus(args.sequences, rng), args.batch, rng)
    work = Path(tempfile.mkdtemp(prefix="svm-dask-"))
    params = work / "params.npz"
    np.savez(params, W_ih=rng.standard_normal((1024, 128)).astype(np.float32) * 0.1,
             W_hh=rng.standard_normal((1024, 256)).astype(np.float32) * 0.1,
             b_ih=np.zeros(1024, np.float32), b_hh=np.zeros(1024, np.float32))
    print(f"{args.sequences} sequences (lengths 8-512) in {len(items)} batches of up to {args.batch}, "
          f"{len({it['x'].shape for it in items})} shapes; {args.workers} workers")
    archive = work / "archive"
    runs = {}  # name -> one summary per repeat
    for repeat in range(args.repeats):
        for workers in (args.workers, 1):
            for kind in ("cold", "warm"):
                name = f"{kind}, {workers} worker{'s' if workers > 1 else ''}"
                if kind == "warm" and not archive.exists():
                    continue  # the first cold run on W workers exports it
                cache = work / f"cold-cache-{repeat}-{workers}"
                # Each run meets the batches in an order of its own (a warm cluster's workers then ask
                # for other row ranges than the ones the archive's kernels were compiled for).
                order = [items[i] for i in rng.permutation(len(items))]
                figures = summary(f"[{repeat + 1}/{args.repeats}] {name}",
                                  *run(order, str(params), workers, cache_dir=str(cache) if kind == "cold" else None,
                                       archive=str(archive) if kind == "warm" else None))
                runs.setdefault(name, []).append(figures)
                if kind == "cold" and not archive.exists():
                    shapevm.export_cache(archive, cache)
    medians = {name: {key: statistics.median(f[key] for f in figs)
                      for key in ("seconds", "steps_per_s", "steady_steps_per_s", "to_steady_s", "to_first_compiled_s",
                                  "compiles", "cache_hits")} for name, figs in runs.items()}
    print(f"medians over {args.repeats} repeat(s):")
    for name, m in medians.items():
        print(f"  {name}: " + ", ".join(f"{key} {value:.3g}" for key, value in m.items()))
    w = f"{args.workers} workers"
    if f"warm, {w}" in medians:
        cold, warm = medians[f"cold, {w}"], medians[f"warm, {w}"]
        first = cold["to_first_compiled_s"] / warm["to_first_compiled_s"]
        print(f"warm vs cold on {w}: first compiled call {first:.1f}x "
              f"sooner, steady throughput reached {cold['to_steady_s'] / max(warm['to_steady_s'], 1e-9):.1f}x sooner; "
              f"{w} vs 1 (warm, steady): "
              f"{warm['steady_steps_per_s'] / medians['warm, 1 worker']['steady_steps_per_s']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "medians": medians}, indent=2))


if __name__ == "__main__":
    main()
