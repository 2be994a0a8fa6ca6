# SPDX-License-Identifier: Apache-2.0
# shapevm.dask: a ShapeVM module over many variable-shape inputs on a Dask distributed cluster
# (docs/scale-out.md). Each worker process loads the module once and keeps it; workers share one
# compiled-kernel cache and tuning database (a directory they all see, or an exported archive
# shipped to them through Dask), so a shape bucket compiled anywhere is loaded everywhere else.
# Each worker's kernels split across its share of the host's cores (kernel_threads), not all of
# them, unless the caller set kernel_threads.
# Invariant: results come back in the items' order, equal to a single-process run; every failure
# reaches the client as a PartitionError naming the partition, never as a hung cluster: a cluster
# left without workers (all died, or their cluster manager closed them) fails the partitions still
# waiting once no_workers_timeout has passed without a worker. When the client owns its cluster (a
# LocalCluster or another SpecCluster), workers the cluster closed are asked back, a bounded
# number of times per call (restore_workers).
import collections
import hashlib
import itertools
import logging
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
_COUNTS = {"setups": 0, "loads": 0, "partitions": 0, "items": 0, "calls": 0}  # setups: the plugin's
# Per worker process (time.time()): when its first partition started, and when a call of it first
# ran a compiled kernel (None until then); the *_cpu entries: the process's CPU seconds then
# (time.process_time(): every thread's, the compile thread's and the kernels' included).
# setup/setup_cpu: when the worker plugin's setup started (an archive's import, then the model's
# warm start come after it).
_TIMES = {"first_task": None, "first_compiled": None, "first_task_cpu": None, "first_compiled_cpu": None,
          "setup": None, "setup_cpu": None, "first_compiled_launch_call": None}
# Per worker process: the kernel_threads the plugin set (0 = auto) and why ("settings": the
# caller's, "environment": SHAPEVM_KERNEL_THREADS, "share": the worker's share of the host).
_THREADS = {"kernel_threads": None, "kernel_threads_from": None}
# Per worker process: what map_model(warm_start=True)'s warm start did (Module.warm_start's
# counts, its wall seconds and the process's CPU seconds over it); empty without one.
_WARM = {}
# Per worker process: (start time.time(), seconds, input elements, the process's CPU seconds at
# its start, the process's CPU seconds over it) of each call, the first _MAX_CALLS.
_CALLS = []
_MAX_CALLS = 100_000
# How often map_model looks at the cluster's workers while it waits (seconds); the client's view
# of them is itself refreshed every distributed.client.scheduler-info-interval (2 s).
_POLL_S = 1.0
_LOG = logging.getLogger("shapevm.dask")
# cluster_stats reports these per worker, not summed.
_PER_WORKER_ONLY = ("pid", "to_first_compiled_s", "cpu_to_first_compiled_s", "started_at", "first_task_at",
                    "first_task_cpu_s", "first_compiled_at", "setup_at", "setup_cpu_s",
                    "kernel_threads", "kernel_threads_from", "calls", "warm_start", "first_compiled_launch_call")


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


def kernel_threads_share(cores, workers_on_host, nthreads):
    """kernel_threads for a worker that shares `cores` with `workers_on_host` workers (itself
    included) and runs `nthreads` tasks at once: its cores split among its tasks, at least 1; 0
    (auto) when that is every core (a lone worker running one task at a time), so ShapeVM's own
    auto rules (small kernels on one thread, a core left to a busy compile) still apply."""
    share = max(1, cores // (max(workers_on_host, 1) * max(nthreads, 1)))
    return 0 if share >= cores else share


def _set_kernel_threads(worker, settings, workers_per_host):
    """Sets kernel_threads in this worker process: the caller's (settings, or the worker's
    SHAPEVM_KERNEL_THREADS environment), else the worker's share of the host's cores."""
    import shapevm
    if "kernel_threads" in settings:
        value, source = settings["kernel_threads"], "settings"
    elif os.environ.get("SHAPEVM_KERNEL_THREADS"):
        value, source = os.environ["SHAPEVM_KERNEL_THREADS"], "environment"
    else:
        from dask.system import CPU_COUNT  # the affinity mask capped by a cgroup quota
        from distributed.comm import get_address_host
        try:
            host = get_address_host(worker.address)
        except Exception:  # noqa: BLE001 - an address without a host: count this worker alone
            host = None
        state = getattr(worker, "state", None)  # Worker.state.nthreads; Worker.nthreads before 2022.11
        nthreads = getattr(state, "nthreads", None) or getattr(worker, "nthreads", 1) or 1
        value = kernel_threads_share(CPU_COUNT, workers_per_host.get(host, 1), nthreads)
        source = "share"
    shapevm.set_context(kernel_threads=value)  # also undoes an earlier call's setting
    with _STATE_LOCK:
        _THREADS["kernel_threads"] = int(shapevm.get_context()["kernel_threads"])
        _THREADS["kernel_threads_from"] = source


class ShapeVMWorkerPlugin(WorkerPlugin):
    """Prepares each worker process before its first task: the cache directory every later
    ShapeVM program in it uses, an imported cache archive, process-wide settings (tunables) and
    kernel_threads (the worker's share of its host's cores unless the settings or the worker's
    environment give it). Registered by map_model (one per cluster, replaced when the options or
    the cluster's workers per host change)."""

    name = PLUGIN_NAME

    def __init__(self, cache_dir=None, archive=None, settings=None, workers_per_host=None):
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self.archive = archive  # {relative path: bytes} or None
        self.settings = dict(settings or {})
        self.workers_per_host = dict(workers_per_host or {})  # host -> workers on it, as map_model saw them

    def setup(self, worker):
        import shapevm
        with _STATE_LOCK:
            if _TIMES["setup"] is None:
                _TIMES["setup"], _TIMES["setup_cpu"] = time.time(), time.process_time()
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
        _set_kernel_threads(worker, self.settings, self.workers_per_host)
        with _STATE_LOCK:
            _COUNTS["setups"] += 1

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
        if spec.get("warm_start"):
            # Before the first call: what the worker's cache (the imported archive) lists for the
            # model is installed now, on this thread, not queued behind the first calls.
            started = time.process_time()
            result = loaded.warm_start()
            _WARM.update(installed=result["installed"], declined=result["declined"], failed=result["failed"],
                         codegens=result["codegens"], wall_s=result["wall_ms"] / 1000,
                         cpu_s=time.process_time() - started, note=result["note"])
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
            _TIMES["first_task"], _TIMES["first_task_cpu"] = time.time(), time.process_time()
    try:
        loaded, function, params = _model_for(spec)
        outputs = []
        for offset, item in enumerate(chunk):
            started, clock, cpu = time.time(), time.perf_counter(), time.process_time()
            try:
                outputs.append(function(**item, **params))
            except Exception as err:  # noqa: BLE001 - named with its item below
                raise PartitionError(
                    f"partition {index} (item {first + offset}): {type(err).__name__}: {err}") from None
            if len(_CALLS) < _MAX_CALLS:
                elements = sum(int(np.size(v)) for v in item.values())
                _CALLS.append((started, time.perf_counter() - clock, elements, cpu, time.process_time() - cpu))
            with _STATE_LOCK:
                _COUNTS["calls"] += 1
                calls_so_far = _COUNTS["calls"]
            if _TIMES["first_compiled_launch_call"] is None and loaded.stats().get("launches_compiled", 0) > 0:
                with _STATE_LOCK:
                    if _TIMES["first_compiled_launch_call"] is None:
                        _TIMES["first_compiled_launch_call"] = calls_so_far
            if _TIMES["first_compiled"] is None and _runs_compiled(loaded.stats()):
                with _STATE_LOCK:
                    if _TIMES["first_compiled"] is None:
                        _TIMES["first_compiled"], _TIMES["first_compiled_cpu"] = time.time(), time.process_time()
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
    """Registers the worker plugin, unless this client already registered one with the same
    options on the same scheduler (re-registering runs every worker's setup again: the archive
    shipped and imported once more). Workers that join later get the registered one. Returns
    the scheduler's info (its workers)."""
    archive = _read_archive(cache_archive) if cache_archive is not None else None
    info = client.scheduler_info()
    workers_per_host = dict(collections.Counter(w.get("host") for w in info.get("workers", {}).values()))
    digest = hashlib.sha256()
    for name, data in sorted((archive or {}).items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    key = (info.get("id"), None if cache_dir is None else str(cache_dir),
           archive is not None and digest.hexdigest(), repr(sorted((settings or {}).items())),
           sorted(workers_per_host.items(), key=repr))
    if getattr(client, "_shapevm_plugin_key", None) != key:
        client.register_worker_plugin(ShapeVMWorkerPlugin(cache_dir, archive, settings, workers_per_host),
                                      name=PLUGIN_NAME)
        client._shapevm_plugin_key = key
    return info


def map_model(client, model_path, items, fn=None, params=None, *, partition_size=None, jit_level="O2",
              wait=False, cache_dir=None, cache_archive=None, settings=None, no_workers_timeout=120.0,
              restore_workers=4, warm_start=False):
    """Runs `fn` of the ShapeVM module at `model_path` (.py, .svasm, .svm or .onnx, a path every
    worker can read) over `items`: a list of dicts {input name: numpy array} of any shapes the
    module accepts, or a dask Bag of them. `params`: an .npz of further named arguments (weights),
    read once per worker. Returns the outputs in the items' order: an array, or a tuple for several.

    cache_dir: a kernel cache + tuning database directory every worker sees (they write back what
    they compile). cache_archive: a directory from `shapevm cache export` (or
    shapevm.export_cache), shipped to every worker through Dask and imported into a private cache.
    settings: tunables set on each worker (shapevm.set_context), e.g. {"hot_count": 0}. Without
    kernel_threads there (or SHAPEVM_KERNEL_THREADS in a worker's environment), each worker gets
    its share of its host's cores: cores // (workers on the host * the worker's threads), and
    auto when that is all of them.
    Failures raise PartitionError on the client, naming the partition and item, once every
    partition has finished (the others' outputs are on the error: PartitionError.results).
    no_workers_timeout: seconds the cluster may have no worker at all before the partitions still
    waiting fail (None: wait for workers forever, e.g. for an adaptive cluster that starts empty
    and slowly). Workers that keep dying are otherwise replaced by their nannies, but a
    LocalCluster (any SpecCluster) closes a worker's nanny for good when no worker of its name is
    back distributed.deploy.lost-worker-timeout (15 s) after a death: on a loaded host, where a
    restart takes seconds, repeated deaths can leave the cluster with no worker, and without this
    timeout the call would wait forever.
    restore_workers: when the client owns its cluster (Client(LocalCluster(...)), any
    SpecCluster), how many workers the cluster closed this way map_model may ask it to start again
    during the call (it calls cluster.scale with the cluster's own worker count, which reopens the
    closed ones); 0: never. A worker that dies at every start is asked back at most this often,
    so the bound above still holds.
    warm_start: each worker warm-starts the module when it loads it, before its first call
    (shapevm.load(..., warm_start=True)): every kernel and fused region its cache (the imported
    cache_archive, or cache_dir) lists for the module is installed and validated then, so the
    first call runs compiled instead of profiling interpreted and waiting for the background
    compile thread. cluster_stats reports what it did per worker ("warm_start")."""
    model_path = str(model_path)
    params = None if params is None else str(params)
    spec = {"model": model_path, "fn": fn, "params": params, "jit_level": jit_level, "wait": wait,
            "warm_start": bool(warm_start)}
    info = _register(client, cache_dir, cache_archive, settings)
    try:
        import dask.bag as db
        is_bag = isinstance(items, db.Bag)
    except ImportError:
        is_bag = False
    if is_bag:
        items = items.compute()
    workers = max(len(info.get("workers", {})), 1)
    chunks = _partitions(items, partition_size, workers)
    starts = list(itertools.accumulate([0] + [len(c) for c in chunks[:-1]]))
    token = uuid.uuid4().hex[:12]

    def submit(index, attempt=""):
        # Each partition's inputs travel inside its task (Dask serializes the arrays), not scattered:
        # a worker that dies takes no input with it, so the scheduler can rerun its tasks elsewhere.
        # The task's key names the partition (the dashboard, the logs, KilledWorker).
        return client.submit(_run_partition, spec, chunks[index], index, starts[index],
                             key=f"shapevm-partition-{index}-{token}{attempt}", pure=False)

    restorer = _Restorer(client, restore_workers)
    outcomes = _settle(client, [submit(index) for index in range(len(chunks))], no_workers_timeout, restorer)
    killed = [index for index, (state, _) in enumerate(outcomes) if state == "killed"]
    # A worker's death counts against every partition it was running or holding, so a partition
    # that only shared a worker with one that kills it may be failed too (or its task lost): each
    # gets one more try on its own, where only its own deaths count. Not on a cluster left
    # without workers: the retry would only wait for them again.
    retry = [index for index, (state, _) in enumerate(outcomes)
             if state == "lost" or (state == "killed" and len(killed) > 1)]
    for index in retry:
        if any(state == "no-workers" for state, _ in outcomes):
            break
        outcomes[index] = _settle(client, [submit(index, "r")], no_workers_timeout, restorer)[0]
    failed = {index: value for index, (state, value) in enumerate(outcomes) if state != "ok"}
    results = []
    for index, (state, value) in enumerate(outcomes):
        results.extend(value if state == "ok" else [None] * len(chunks[index]))
    if failed:
        first = min(failed)
        more = f" (and {len(failed) - 1} more partitions: {sorted(failed)[1:]})" if len(failed) > 1 else ""
        raise PartitionError(failed[first] + more, partition=first, failed=failed, results=results)
    return results


class _Restorer:
    """Asks the client's own cluster (a SpecCluster: LocalCluster and most cluster managers) to start
    again the workers it closed (in its spec, gone from its workers), at most `budget` workers over
    the object's life; each missing worker is asked for once until it is back."""

    def __init__(self, client, budget):
        from distributed.deploy.spec import SpecCluster
        cluster = getattr(client, "cluster", None)
        self.cluster = cluster if isinstance(cluster, SpecCluster) and budget else None
        self.budget = budget
        self.asked = set()  # names asked for and not yet back
        self.restored = 0

    def check(self):
        from distributed.core import Status
        cluster = self.cluster
        if cluster is None or cluster.status != Status.running:
            return
        spec, running = set(cluster.worker_spec), set(cluster.workers)  # set(dict): atomic under the GIL
        self.asked &= spec - running
        missing = spec - running - self.asked
        if not missing:
            return
        if self.restored + len(missing) > self.budget:
            _LOG.warning("shapevm.dask: the cluster closed workers %s; not asking for them again (restore_workers=%d "
                         "used up in this call)", sorted(map(str, missing)), self.budget)
            self.cluster = None
            return
        _LOG.warning("shapevm.dask: the cluster closed workers %s (a restart slower than "
                     "distributed.deploy.lost-worker-timeout); asking it to start them again",
                     sorted(map(str, missing)))
        self.asked |= missing
        self.restored += len(missing)
        cluster.scale(len(cluster.worker_spec))  # the same count: starts the spec's workers that are not running


def _settle(client, futures, no_workers_timeout=None, restorer=None):
    """Waits for every future; per future ("ok", its outputs), ("error", message), ("killed",
    message) when its workers died more often than Dask's allowed-failures, ("lost", message)
    when its task ended otherwise (cancelled by the scheduler as its worker went away), or
    ("no-workers", message) when it was still waiting after the cluster had no worker for
    no_workers_timeout seconds (None: wait for workers forever). restorer: a _Restorer checked at
    every poll and once at the end."""
    from distributed import TimeoutError as DaskTimeoutError
    from distributed import wait
    from distributed.scheduler import KilledWorker

    outcomes = []
    stranded = set()
    try:
        pending = list(futures)
        workerless_since = None
        while pending:
            if restorer is not None:
                restorer.check()
            if no_workers_timeout is not None:
                if client.scheduler_info().get("workers"):
                    workerless_since = None
                elif workerless_since is None:
                    workerless_since = time.monotonic()
                elif time.monotonic() - workerless_since >= no_workers_timeout:
                    stranded = set(pending)
                    break
            try:
                wait(pending, timeout=_POLL_S)
            except (DaskTimeoutError, TimeoutError):
                pass
            pending = [future for future in pending if not future.done()]
        if restorer is not None:
            restorer.check()  # a worker closed while the last partitions finished
        for future in futures:
            index = int(str(future.key).split("-")[2])
            if future in stranded:
                outcomes.append(("no-workers", f"partition {index}: the cluster has had no workers for "
                                               f"{no_workers_timeout:g} s (every worker died or was closed; "
                                               "a LocalCluster closes a worker whose nanny has not brought it "
                                               "back within distributed.deploy.lost-worker-timeout); see the "
                                               "workers' logs"))
                continue
            if future.status == "finished":
                outcomes.append(("ok", future.result()))
                continue
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


def _process_started_at():
    """When this process started, as time.time() (Linux: to a clock tick; psutil's create_time
    rounds the boot time to a second)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat, open("/proc/uptime", encoding="ascii") as uptime:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
            up = float(uptime.read().split()[0])
        return time.time() - (up - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        import psutil
        return psutil.Process().create_time()


def _worker_stats(calls=False):
    import psutil
    keys = ("runs", "codegen_count", "kernels_from_cache", "launches_compiled", "launches_interpreted",
            "kernels_installed", "compile_ms", "tuning_ms")
    total = {key: 0 for key in keys}
    with _STATE_LOCK:
        models = list(_MODELS.values())
        counts = dict(_COUNTS)
        times = dict(_TIMES)
        threads = dict(_THREADS)
        warm = dict(_WARM)
    cpu = psutil.Process().cpu_times()
    for loaded, _, _ in models:
        stats = loaded.stats()
        for key in keys:
            total[key] += stats.get(key, 0)
    return {"runs": total["runs"], "compiles": total["codegen_count"], "cache_hits": total["kernels_from_cache"],
            "launches_compiled": total["launches_compiled"], "launches_interpreted": total["launches_interpreted"],
            "kernels_installed": total["kernels_installed"], "compile_ms": total["compile_ms"],
            "tuning_ms": total["tuning_ms"], "setups": counts["setups"], "loads": counts["loads"],
            "partitions": counts["partitions"],
            "items": counts["items"], "cpu_s": cpu.user + cpu.system, "pid": os.getpid(),
            "to_first_compiled_s": (times["first_compiled"] - times["first_task"]
                                    if times["first_compiled"] is not None else None),
            "started_at": _process_started_at(), "first_task_at": times["first_task"],
            "first_task_cpu_s": times["first_task_cpu"], "first_compiled_at": times["first_compiled"],
            "setup_at": times["setup"], "setup_cpu_s": times["setup_cpu"],
            "cpu_to_first_compiled_s": (times["first_compiled_cpu"] - times["first_task_cpu"]
                                        if times["first_compiled_cpu"] is not None else None), **threads,
            "warm_start": warm or None, "first_compiled_launch_call": times["first_compiled_launch_call"],
            **({"calls": [list(call) for call in _CALLS]} if calls else {})}


def cluster_stats(client, calls=False):
    """Every worker's ShapeVM figures (runs, compiles = LLVM code generations, cache_hits = kernels
    loaded from the kernel cache, launches_compiled / launches_interpreted, kernels_installed,
    setups (of the worker plugin), loads, partitions, items, cpu_s = the worker process's CPU
    seconds), summed over the cluster,
    with each worker's dict under "workers". Per worker only: pid; to_first_compiled_s (seconds
    from the start of its first partition, module load included, to the end of its first call
    after which compiled code was installed; None before); started_at (the process's start),
    first_task_at, first_compiled_at (time.time() on the worker's clock, None before) and
    first_task_cpu_s (the process's CPU seconds when its first task started); setup_at and
    setup_cpu_s (the same when the worker plugin's setup started);
    kernel_threads (0 = auto) and kernel_threads_from ("share", "settings" or "environment");
    warm_start (map_model(warm_start=True); else None): installed, declined, failed, codegens,
    wall_s and cpu_s of the worker's warm start, and its note; first_compiled_launch_call: the number
    (1-based) of the worker's first call that ran a compiled kernel or region (None before);
    cpu_to_first_compiled_s: the process's CPU seconds over to_first_compiled_s (the
    compile thread's included; what a loaded host does not stretch); with calls=True, calls:
    [start time.time(), seconds, input elements, the process's CPU seconds at its start, the
    process's CPU seconds over the call] of each call."""
    per_worker = client.run(_worker_stats, calls)
    summed = {}
    for stats in per_worker.values():
        for key, value in stats.items():
            if key not in _PER_WORKER_ONLY:
                summed[key] = summed.get(key, 0) + value
    summed["workers"] = per_worker
    return summed
