# SPDX-License-Identifier: Apache-2.0
# Variable-length batch inference on Dask (issue 26, docs/scale-out.md): a corpus of sequences with
# lengths drawn from 8-512, batched by a length-bucketing sampler, run through the reference LSTM
# cell (examples/lstm_cell.py) on a LocalCluster of worker processes. It runs the corpus cold
# (empty caches), exports the cache the cold run wrote, runs it again on a fresh cluster that
# starts from that archive, and once more on one worker, then prints throughput (sequence steps
# per second, padding included), the time until the cluster reaches its steady throughput, and
# per-worker compiles and cache hits.
# Usage: PYTHONPATH=build/python /usr/bin/python3 examples/dask_batch_inference.py [--sequences N]
#        [--workers W] [--batch B] [--json OUT.json]
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
    per_worker = {addr: {k: w[k] for k in ("compiles", "cache_hits", "runs", "loads")}
                  for addr, w in stats["workers"].items()}
    print(f"{name}: {tokens} steps in {total_s:.1f} s ({tokens / total_s:.0f} steps/s), steady "
          f"{steady:.0f} steps/s, reached after {until:.1f} s; compiles {stats['compiles']}, cache hits "
          f"{stats['cache_hits']}")
    for addr, w in per_worker.items():
        print(f"  {addr}: {w}")
    return {"seconds": total_s, "steps": tokens, "steady_steps_per_s": steady, "to_steady_s": until,
            "compiles": stats["compiles"], "cache_hits": stats["cache_hits"], "workers": per_worker}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sequences", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
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
    figures = {}
    figures["cold"] = summary("cold", *run(items, str(params), args.workers, cache_dir=str(work / "cold-cache")))
    shapevm.export_cache(work / "archive", work / "cold-cache")
    figures["warm"] = summary("warm (from the exported archive)",
                              *run(items, str(params), args.workers, archive=str(work / "archive")))
    figures["one_worker_warm"] = summary("one worker, warm", *run(items, str(params), 1, archive=str(work / "archive")))
    ratio = figures["cold"]["to_steady_s"] / max(figures["warm"]["to_steady_s"], 1e-9)
    scaling = figures["warm"]["steady_steps_per_s"] / max(figures["one_worker_warm"]["steady_steps_per_s"], 1e-9)
    print(f"warm start reaches steady throughput {ratio:.1f}x sooner; {args.workers} workers vs 1: {scaling:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
