# SPDX-License-Identifier: Apache-2.0
# shapevm.dask: a ShapeVM module over many variable-shape inputs on a Dask distributed cluster
# (docs/scale-out.md). Each worker process loads the module once and keeps it; workers share one
# compiled-kernel cache and tuning database (a directory they all see, or an exported archive
# shipped to them through Dask), so a shape bucket compiled anywhere is loaded everywhere else.
# Invariant: results come back in the items' order, equal to a single-process run; every failure
# reaches the client as a PartitionError naming the partition, never as a hung cluster.
import itertools
import math
import os
import threading
import time
import uuid
from pathlib import Path

import numpy as np
from distributed import WorkerPlugin

__all__ = ["map_model", "cluster_stats", "PartitionError", "ShapeVMWorkerPlugin"]

PLUGIN_NAME = "shapevm"
_STATE_LOCK = threading.Lock()
_MODELS = {}  # per worker process: spec key -> (loaded module, function, params)
_COUNTS = {"loads": 0, "partitions": 0, "items": 0}
# Per worker process (time.time()): when its first partition started, and when a call of it first
# ran a compiled kernel (None until then).
_TIMES = {"first_task": None, "first_compiled": None}
_PER_WORKER_ONLY = ("pid", "to_first_compiled_s")  # cluster_stats reports these per worker, not summed


class PartitionError(RuntimeError):
    """A partition failed on a worker (bad input, an unreadable model) or its workers kept dying.

    Raised on the client once every partition has finished or failed. The message is the first
    failed partition's; `partition` is its index, `failed` maps every failed partition's index to
    its message, and `results` holds the outputs in the items' order, None for the items of the
    failed partitions (what the other partitions computed is not lost)."""

    def __init__(self, message, partition=None, failed=None, results=None):
        super().__init__(message)
        self.partition = partition
        self.failed = dict(failed or {})
        self.results = results


def _read_archive(path):
    """An exported cache directory (`shapevm cache export DIR`) as {relative path: bytes}."""
    root = Path(path)
    if not (root / "kernels").is_dir() and not (root / "tuning.jsonl").is_file():
        raise ValueError(f"cache archive {path!r} is not a directory written by `shapevm cache export` "
                         "(no kernels/ or tuning.jsonl)")
    files = {}
    for file in sorted(root.rglob("*")):
        if file.is_file():
            files[str(file.relative_to(root))] = file.read_bytes()
    return files


class ShapeVMWorkerPlugin(WorkerPlugin):
    """Prepares each worker process before its first task: the cache directory every later
    ShapeVM program in it uses, an imported cache archive, and process-wide settings (tunables).
    Registered by map_model (one per cluster, replaced when the options change)."""

    name = PLUGIN_NAME

    def __init__(self, cache_dir=None, archive=None, settings=None):
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self.archive = archive  # {relative path: bytes} or None
        self.settings = dict(settings or {})

    def setup(self, worker):
        import shapevm
        cache_dir = self.cache_dir
        if cache_dir is None and self.archive is not None:
            cache_dir = os.path.join(worker.local_directory, "shapevm-cache")  # private, filled from the archive
        if cache_dir is not None:
            os.makedirs(cache_dir, exist_ok=True)
            os.environ["SHAPEVM_CACHE_DIR"] = cache_dir
        if self.archive is not None:
            incoming = Path(worker.local_directory) / "shapevm-archive"
            for name, data in self.archive.items():
                target = incoming / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            shapevm.import_cache(str(incoming), cache_dir)
        if self.settings:
            shapevm.set_context(**self.settings)

    def teardown(self, worker):
        pass


def _spec_key(spec):
    return (spec["model"], spec["fn"], spec["params"], spec["jit_level"])


def _model_for(spec):
    """The worker's loaded module and function for `spec`: loaded on first use, then kept."""
    import shapevm
    key = _spec_key(spec)
    with _STATE_LOCK:
        if key in _MODELS:
            return _MODELS[key]
        loaded = shapevm.load(spec["model"], jit_level=spec["jit_level"], wait=spec["wait"])
        if spec["fn"] is not None:
            function = loaded[spec["fn"]] if spec["fn"] in loaded.functions else getattr(loaded, spec["fn"])
        elif spec["model"].endswith(".onnx"):
            function = loaded["main"]
        elif len(loaded.functions) == 1:
            function = loaded[loaded.functions[0]]
        else:
            raise ValueError(f"{spec['model']} has several functions ({', '.join(loaded.functions)}): pass fn=")
        params = {}
        if spec["params"] is not None:
            with np.load(spec["params"]) as data:
                params = {name: data[name] for name in data.files}
        _MODELS[key] = (loaded, function, params)
        _COUNTS["loads"] += 1
        return _MODELS[key]


def _runs_compiled(stats):
    """True once the program has compiled code to run: a kernel or fused region installed (region
    executions are not counted in launches_compiled), or a compiled launch."""
    return stats.get("kernels_installed", 0) > 0 or stats.get("launches_compiled", 0) > 0


def _run_partition(spec, chunk, index, first):
    with _STATE_LOCK:
        if _TIMES["first_task"] is None:
            _TIMES["first_task"] = time.time()
    try:
        loaded, function, params = _model_for(spec)
        outputs = []
        for offset, item in enumerate(chunk):
            try:
                outputs.append(function(**item, **params))
            except Exception as err:  # noqa: BLE001 - named with its item below
                raise PartitionError(
                    f"partition {index} (item {first + offset}): {type(err).__name__}: {err}") from None
            if _TIMES["first_compiled"] is None and _runs_compiled(loaded.stats()):
                with _STATE_LOCK:
                    _TIMES["first_compiled"] = _TIMES["first_compiled"] or time.time()
        with _STATE_LOCK:
            _COUNTS["partitions"] += 1
            _COUNTS["items"] += len(chunk)
        return outputs
    except PartitionError:
        raise
    except Exception as err:  # noqa: BLE001 - the model could not be loaded or called
        raise PartitionError(f"partition {index}: {type(err).__name__}: {err}") from None


def _partitions(items, partition_size, workers):
    items = list(items)
    if partition_size is None:
        # A few partitions per worker (load balance) but not one task per item (overhead).
        partition_size = max(1, min(64, math.ceil(len(items) / max(4 * workers, 1))))
    if partition_size < 1:
        raise ValueError(f"partition_size must be >= 1, got {partition_size}")
    return [items[i:i + partition_size] for i in range(0, len(items), partition_size)]


def _register(client, cache_dir, cache_archive, settings):
    archive = _read_archive(cache_archive) if cache_archive is not None else None
    plugin = ShapeVMWorkerPlugin(cache_dir, archive, settings)
    client.register_worker_plugin(plugin, name=PLUGIN_NAME)


def map_model(client, model_path, items, fn=None, params=None, *, partition_size=None, jit_level="O2",
              wait=False, cache_dir=None, cache_archive=None, settings=None):
    """Runs `fn` of the ShapeVM module at `model_path` (.py, .svasm, .svm or .onnx, a path every
    worker can read) over `items`: a list of dicts {input name: numpy array} of any shapes the
    module accepts, or a dask Bag of them. `params`: an .npz of further named arguments (weights),
    read once per worker. Returns the outputs in the items' order: an array, or a tuple for several.

    cache_dir: a kernel cache + tuning database directory every worker sees (they write back what
    they compile). cache_archive: a directory from `shapevm cache export` (or
    shapevm.export_cache), shipped to every worker through Dask and imported into a private cache.
    settings: tunables set on each worker (shapevm.set_context), e.g. {"hot_count": 0}.
    Failures raise PartitionError on the client, naming the partition and item, once every
    partition has finished (the others' outputs are on the error: PartitionError.results)."""
    model_path = str(model_path)
    params = None if params is None else str(params)
    spec = {"model": model_path, "fn": fn, "params": params, "jit_level": jit_level, "wait": wait}
    _register(client, cache_dir, cache_archive, settings)
    try:
        import dask.bag as db
        is_bag = isinstance(items, db.Bag)
    except ImportError:
        is_bag = False
    if is_bag:
        items = items.compute()
    workers = max(len(client.scheduler_info().get("workers", {})), 1)
    chunks = _partitions(items, partition_size, workers)
    starts = list(itertools.accumulate([0] + [len(c) for c in chunks[:-1]]))
    token = uuid.uuid4().hex[:12]

    def submit(index, attempt=""):
        # Each partition's inputs travel inside its task (Dask serializes the arrays), not scattered:
        # a worker that dies takes no input with it, so the scheduler can rerun its tasks elsewhere.
        # The task's key names the partition (the dashboard, the logs, KilledWorker).
        return client.submit(_run_partition, spec, chunks[index], index, starts[index],
                             key=f"shapevm-partition-{index}-{token}{attempt}", pure=False)

    outcomes = _settle(client, [submit(index) for index in range(len(chunks))])
    killed = [index for index, (state, _) in enumerate(outcomes) if state == "killed"]
    # A worker's death counts against every partition it was running or holding, so a partition
    # that only shared a worker with one that kills it may be failed too (or its task lost): each
    # gets one more try on its own, where only its own deaths count.
    retry = [index for index, (state, _) in enumerate(outcomes)
             if state == "lost" or (state == "killed" and len(killed) > 1)]
    for index in retry:
        outcomes[index] = _settle(client, [submit(index, "r")])[0]
    failed = {index: value for index, (state, value) in enumerate(outcomes) if state != "ok"}
    results = []
    for index, (state, value) in enumerate(outcomes):
        results.extend(value if state == "ok" else [None] * len(chunks[index]))
    if failed:
        first = min(failed)
        more = f" (and {len(failed) - 1} more partitions: {sorted(failed)[1:]})" if len(failed) > 1 else ""
        raise PartitionError(failed[first] + more, partition=first, failed=failed, results=results)
    return results


def _settle(client, futures):
    """Waits for every future; per future ("ok", its outputs), ("error", message), ("killed",
    message) when its workers died more often than Dask's allowed-failures, or ("lost", message)
    when its task ended otherwise (cancelled by the scheduler as its worker went away)."""
    from distributed import wait
    from distributed.scheduler import KilledWorker

    outcomes = []
    try:
        wait(futures)
        for future in futures:
            if future.status == "finished":
                outcomes.append(("ok", future.result()))
                continue
            index = int(str(future.key).split("-")[2])
            if future.status != "error":
                outcomes.append(("lost", f"partition {index}: its task was {future.status} (its worker went away)"))
                continue
            err = future.exception()
            if isinstance(err, KilledWorker):
                outcomes.append(("killed", f"partition {index}: the workers running it died repeatedly (more "
                                           "often than Dask's distributed.scheduler.allowed-failures allows; "
                                           f"{err}); see the workers' logs"))
            elif isinstance(err, PartitionError):
                outcomes.append(("error", str(err)))
            else:
                outcomes.append(("error", f"partition {index}: {type(err).__name__}: {err}"))
    finally:
        client.cancel(futures)
    return outcomes


def _worker_stats():
    keys = ("runs", "codegen_count", "kernels_from_cache", "launches_compiled", "launches_interpreted",
            "kernels_installed", "compile_ms", "tuning_ms")
    total = {key: 0 for key in keys}
    with _STATE_LOCK:
        models = list(_MODELS.values())
        counts = dict(_COUNTS)
        times = dict(_TIMES)
    for loaded, _, _ in models:
        stats = loaded.stats()
        for key in keys:
            total[key] += stats.get(key, 0)
    return {"runs": total["runs"], "compiles": total["codegen_count"], "cache_hits": total["kernels_from_cache"],
            "launches_compiled": total["launches_compiled"], "launches_interpreted": total["launches_interpreted"],
            "kernels_installed": total["kernels_installed"], "compile_ms": total["compile_ms"],
            "tuning_ms": total["tuning_ms"], "loads": counts["loads"], "partitions": counts["partitions"],
            "items": counts["items"], "pid": os.getpid(),
            "to_first_compiled_s": (times["first_compiled"] - times["first_task"]
                                    if times["first_compiled"] is not None else None)}


def cluster_stats(client):
    """Every worker's ShapeVM figures (runs, compiles = LLVM code generations, cache_hits = kernels
    loaded from the kernel cache, launches_compiled / launches_interpreted, kernels_installed,
    loads, partitions, items), summed over the cluster, with each worker's dict under "workers".
    Per worker only: pid, and to_first_compiled_s (seconds from the start of its first partition,
    module load included, to the end of its first call after which compiled code was installed;
    None before)."""
    per_worker = client.run(_worker_stats)
    summed = {}
    for stats in per_worker.values():
        for key, value in stats.items():
            if key not in _PER_WORKER_ONLY:
                summed[key] = summed.get(key, 0) + value
    summed["workers"] = per_worker
    return summed
