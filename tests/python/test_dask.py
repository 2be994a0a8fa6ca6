# SPDX-License-Identifier: Apache-2.0
# shapevm.dask (issue 26, docs/scale-out.md) on LocalClusters of 2 worker processes: results equal
# a single-process O0 run, each worker loads the module once, two workers compiling the same new
# buckets into one shared cache leave only valid entries, a second cluster started from an
# exported archive compiles nothing for the covered shapes even when it meets them in another
# order, a worker killed mid-run loses no result (and the cluster closing it is asked to start it
# again), a partition that kills every worker running it
# is a clear error that leaves the others' results and the cluster usable, a cluster left with no
# worker at all fails the waiting partitions in bounded time (it hung before), and bad input (an
# unreadable model, a rejected partition, a foreign archive) is a clear error on the client.
import logging
import os
import sys
import threading
import time

import numpy as np
import pytest

from conftest import ROOT

import shapevm

if getattr(shapevm, "_core", None) is None:
    pytest.skip("this build has no Python module (a sanitizer build, or SHAPEVM_BUILD_PYTHON=OFF)",
                allow_module_level=True)
distributed = pytest.importorskip("distributed")
import dask  # noqa: E402
import shapevm.dask as svd  # noqa: E402

MODEL = str(ROOT / "tests" / "python" / "dask_model.py")
# Every region hot at once, compiled before the call returns, default kernels (no tuning by timing).
SETTINGS = {"warmup": 0, "hot_count": 0, "hot_ms": 0, "tune_budget_ms": 0}


@pytest.fixture(scope="module", autouse=True)
def cluster_config():
    """For every cluster of this module (the client's process runs the LocalCluster, and reads
    these at each worker start and death):
    - Worker processes fork from a forkserver that has imported distributed and numpy once, not
      a fresh interpreter each (spawn): a worker start or restart after a kill costs about half
      the time on a loaded 2-core host, and closing a cluster a fifth. Still one process per
      worker, none of the client's state (ShapeVM's included) in it.
    - A LocalCluster closes a worker's nanny for good when no worker of its name has registered
      distributed.deploy.lost-worker-timeout (15 s) after one of them died. On a loaded host a
      restart alone can take that long, so the tests that kill workers and then use the replaced
      ones would lose them; the test of a cluster left with no worker sets it to 0 itself."""
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver",
                          "distributed.deploy.lost-worker-timeout": "600s"}):
        yield


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("dask")
    rng = np.random.default_rng(26)
    params = root / "params.npz"
    np.savez(params, w=rng.standard_normal((16, 24)).astype(np.float32) * 0.3,
             b=rng.standard_normal(24).astype(np.float32))
    rows = [3, 5, 17, 33, 5, 3, 64, 17]
    items = [{"x": rng.standard_normal((rows[i % len(rows)], 16)).astype(np.float32)} for i in range(48)]
    reference = shapevm.load(MODEL, jit_level="O0")
    with np.load(params) as p:
        expected = [reference.dense(x=item["x"], w=p["w"], b=p["b"]) for item in items]
    return {"root": root, "params": str(params), "items": items, "expected": expected}


def cluster(allowed_failures=None):
    # Worker processes must import the built package, not the source tree's oracle-only copy that
    # other test files put on sys.path: multiprocessing hands the workers this process's sys.path
    # (then PYTHONPATH), so the built package's folder goes first in both.
    built = os.path.dirname(os.path.dirname(shapevm.__file__))
    if sys.path[0] != built:
        sys.path.insert(0, built)
    os.environ["PYTHONPATH"] = os.pathsep.join([built, os.environ.get("PYTHONPATH", "")])
    # The scheduler (in this process) reads allowed-failures when it starts.
    config = {} if allowed_failures is None else {"distributed.scheduler.allowed-failures": allowed_failures}
    with dask.config.set(config):
        local = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                         silence_logs=logging.ERROR)
    return local, distributed.Client(local)


def check(results, expected):
    assert len(results) == len(expected)
    for got, want in zip(results, expected):
        assert got.shape == want.shape
        assert np.linalg.norm(got - want) <= 1e-5 * np.linalg.norm(want)


def valid_entries(cache_dir, tmp):
    """(kernel files in the cache, of which pass their checks): export copies only valid ones.
    Install records (.svmi, what each function installed) sit beside the kernels and are not counted."""
    files = [f for f in os.listdir(os.path.join(cache_dir, "kernels")) if f.endswith(".svmk")]
    exported = shapevm.export_cache(tmp, cache_dir)["kernels"]
    return len(files), exported


def test_two_workers_share_one_cache_and_a_second_cluster_starts_warm(data):
    shared = data["root"] / "shared-cache"
    local, client = cluster()
    try:
        results = svd.map_model(client, MODEL, data["items"], fn="dense", params=data["params"],
                                partition_size=4, cache_dir=str(shared), settings=SETTINGS, wait=True)
        check(results, data["expected"])
        # The same options again: the plugin is not registered again (no second setup on the workers).
        check(svd.map_model(client, MODEL, data["items"][:2], fn="dense", params=data["params"], partition_size=2,
                            cache_dir=str(shared), settings=SETTINGS, wait=True), data["expected"][:2])
        stats = svd.cluster_stats(client, calls=True)
        assert stats["items"] == 50 and stats["partitions"] == 13 and stats["setups"] == 2, stats
        workers = stats["workers"].values()
        assert all(w["loads"] == (1 if w["partitions"] else 0) for w in workers), stats
        assert stats["compiles"] > 0 and stats["launches_compiled"] > 0, stats
        # Each worker's kernels split across its share of the host's cores (2 workers here), not all.
        share = svd.kernel_threads_share(dask.system.CPU_COUNT, 2, 1)
        from_env = bool(os.environ.get("SHAPEVM_KERNEL_THREADS"))
        assert all(w["kernel_threads_from"] == ("environment" if from_env else "share") for w in workers), stats
        assert from_env or all(w["kernel_threads"] == share for w in workers), stats
        # Every call is logged with its start, seconds and input elements, after the worker started.
        calls = [call for w in workers for call in w["calls"]]
        assert len(calls) == 50
        assert sum(c[2] for c in calls) == sum(it["x"].size for it in data["items"] + data["items"][:2])
        for w in (w for w in workers if w["partitions"]):
            assert all(w["first_task_at"] <= start and seconds > 0 and w["first_task_cpu_s"] <= cpu and call_cpu >= 0
                       for start, seconds, _, cpu, call_cpu in w["calls"]), w
            assert w["started_at"] <= w["setup_at"] <= w["first_task_at"] <= w["first_compiled_at"], w
            assert w["setup_cpu_s"] <= w["first_task_cpu_s"], w
            assert w["cpu_to_first_compiled_s"] > 0, w  # a compile ran in this process (hot_count 0)
        # Both workers met the same new buckets at once: only valid entries in the shared cache.
        files, exported = valid_entries(str(shared), str(data["root"] / "archive"))
        assert files > 0 and exported == files

        # A worker killed mid-run, while it runs partition 7 (the first worker to start it exits at
        # once): Dask reschedules the partition; no result lost, no entry corrupted. With
        # lost-worker-timeout 0 the LocalCluster closes the killed worker's nanny at once (what a
        # restart slower than the timeout does on a loaded host), so only map_model asking the
        # client's cluster to start it again brings the cluster back to two workers.
        pids = list(client.run(os.getpid).values())
        armed = data["root"] / "kill-once"
        armed.write_text("kill")
        client.register_worker_plugin(KillOnPartition(7, armed, once=True))
        with dask.config.set({"distributed.deploy.lost-worker-timeout": "0s"}):
            more = svd.map_model(client, MODEL, data["items"], fn="dense", params=data["params"], partition_size=2,
                                 cache_dir=str(shared), settings=SETTINGS, wait=True)
        assert not armed.exists()  # a worker did die in partition 7
        check(more, data["expected"])
        # The restarted worker registers; until the scheduler notices the dead one, a broadcast may still
        # reach its address, so poll (ignoring that closed connection) for two live, different workers.
        deadline = time.monotonic() + 60
        while True:
            live = [p for p in client.run(os.getpid, on_error="ignore").values() if isinstance(p, int)]
            if len(live) == 2 and set(live) != set(pids):
                break
            assert time.monotonic() < deadline, f"the killed worker ({pids}) was not replaced: {live}"
            time.sleep(0.2)
        files, exported = valid_entries(str(shared), str(data["root"] / "archive-after-kill"))
        assert exported == files

        # Bad input: each a PartitionError on the client naming what failed; the cluster goes on.
        with pytest.raises(svd.PartitionError, match="partition 0: .*nope.py"):
            svd.map_model(client, str(data["root"] / "nope.py"), data["items"][:2], fn="dense",
                          params=data["params"])
        bad = list(data["items"][:4]) + [{"x": np.zeros((2, 3, 16), np.float32)}]
        with pytest.raises(svd.PartitionError, match=r"partition 2 \(item 4\)"):
            svd.map_model(client, MODEL, bad, fn="dense", params=data["params"], partition_size=2)
    finally:
        client.close()
        local.close()

    # A second cluster from the exported archive, shipped through Dask into fresh private caches,
    # meeting the shapes in another order: each worker asks for other row ranges than the first
    # cluster's workers compiled, and is served by the kept kernels whose ranges cover them.
    local, client = cluster()
    try:
        start = time.monotonic()
        order = list(range(len(data["items"])))[::-1]
        order = order[5:] + order[:5]
        results = svd.map_model(client, MODEL, [data["items"][i] for i in order], fn="dense", params=data["params"],
                                partition_size=4, cache_archive=str(data["root"] / "archive"), settings=SETTINGS,
                                wait=True)
        check(results, [data["expected"][i] for i in order])
        stats = svd.cluster_stats(client)
        assert stats["compiles"] == 0, stats  # every kernel came from the archive
        assert stats["cache_hits"] > 0 and stats["launches_compiled"] > 0, stats
        assert time.monotonic() - start < 120
    finally:
        client.close()
        local.close()


def test_a_foreign_or_corrupt_archive_is_ignored_and_compiled_fresh(data, tmp_path):
    archive = tmp_path / "archive"
    (archive / "kernels").mkdir(parents=True)
    (archive / "kernels" / "0123456789abcdef.svk").write_bytes(b"not a kernel")
    (archive / "tuning.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="not a directory written by"):
        svd.map_model(None, MODEL, [], cache_archive=str(tmp_path / "missing"))
    local, client = cluster()
    try:
        results = svd.map_model(client, MODEL, data["items"][:8], fn="dense", params=data["params"],
                                cache_archive=str(archive), settings={**SETTINGS, "kernel_threads": 3}, wait=True)
        check(results, data["expected"][:8])
        stats = svd.cluster_stats(client)
        assert stats["compiles"] > 0  # nothing usable came with it
        # The caller's kernel_threads wins over the worker's share.
        assert all(w["kernel_threads"] == 3 and w["kernel_threads_from"] == "settings"
                   for w in stats["workers"].values()), stats
    finally:
        client.close()
        local.close()


def test_each_worker_gets_its_share_of_the_host_cores_and_auto_when_alone():
    assert svd.kernel_threads_share(2, 2, 1) == 1  # two workers on 2 cores: one each, not 2 each
    assert svd.kernel_threads_share(16, 2, 1) == 8
    assert svd.kernel_threads_share(16, 2, 4) == 2  # four tasks at once in each worker
    assert svd.kernel_threads_share(4, 8, 1) == 1  # more workers than cores: at least one
    assert svd.kernel_threads_share(2, 1, 1) == 0  # alone, one task at a time: auto (all cores)
    assert svd.kernel_threads_share(8, 0, 0) == 0


class KillOnPartition(distributed.WorkerPlugin):
    """Test-only: a worker that starts executing partition `index` (None: any partition) of a
    map_model call exits at once (a segfault, an OOM kill), as long as the file `armed` exists;
    with once=True the first such worker removes the file as it exits."""

    name = "kill-on-partition"

    def __init__(self, index, armed, once=False):
        self.marker = "shapevm-partition-" if index is None else f"shapevm-partition-{index}-"
        self.armed = str(armed)
        self.once = once

    def transition(self, key, start, finish, **kwargs):
        if finish == "executing" and str(key).startswith(self.marker) and os.path.exists(self.armed):
            if self.once:
                os.unlink(self.armed)
            os._exit(13)


def within(seconds, call):
    """call() in a thread: its result, or its exception re-raised; a test failure, instead of a
    hung test run, when it has not returned after `seconds`."""
    box = {}

    def target():
        try:
            box["result"] = call()
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds} s: the client hung"
    if "error" in box:
        raise box["error"]
    return box["result"]


def test_a_partition_that_kills_every_worker_is_a_named_error_and_the_rest_survive(data, tmp_path):
    armed = tmp_path / "armed"
    armed.write_text("kill")
    items = data["items"][:16]
    local, client = cluster(allowed_failures=1)
    try:
        client.register_worker_plugin(KillOnPartition(2, armed))
        start = time.monotonic()
        with pytest.raises(svd.PartitionError, match=r"partition 2: the workers running it died repeatedly") as err:
            svd.map_model(client, MODEL, items, fn="dense", params=data["params"], partition_size=2, settings=SETTINGS,
                          wait=True)
        assert time.monotonic() - start < 90
        assert err.value.partition == 2 and sorted(err.value.failed) == [2], err.value.failed
        # The other partitions' outputs are on the error, in the items' order; the killer's are None.
        results = err.value.results
        assert len(results) == len(items) and results[4] is None and results[5] is None
        check([r for i, r in enumerate(results) if i not in (4, 5)],
              [e for i, e in enumerate(data["expected"][:16]) if i not in (4, 5)])
        # The cluster goes on: disarmed, the same call succeeds on the replaced workers.
        armed.unlink()
        check(svd.map_model(client, MODEL, items, fn="dense", params=data["params"], partition_size=2,
                            settings=SETTINGS, wait=True), data["expected"][:16])

        # Workers that die while their cluster manager gives up on them: every partition kills its
        # worker and the LocalCluster closes each nanny at once (what a restart slower than
        # lost-worker-timeout does on a loaded host). With no worker left, the partitions still
        # waiting fail after no_workers_timeout, named; before, map_model waited forever.
        client.register_worker_plugin(KillOnPartition(None, armed))
        armed.write_text("kill")
        with dask.config.set({"distributed.deploy.lost-worker-timeout": "0s"}):
            with pytest.raises(svd.PartitionError, match=r"^partition \d+: ") as err:
                within(120, lambda: svd.map_model(client, MODEL, items, fn="dense", params=data["params"],
                                                  partition_size=2, settings=SETTINGS, no_workers_timeout=3,
                                                  restore_workers=0))
        assert client.scheduler_info()["workers"] == {}
        stranded = [i for i, message in err.value.failed.items() if "no workers for 3 s" in message]
        assert stranded and all(f"partition {i}: " in err.value.failed[i] for i in stranded), err.value.failed
        assert err.value.results == [None] * len(items)  # every partition's worker died before it finished
    finally:
        client.close()
        local.close()


def test_warm_start_installs_the_archive_before_each_workers_first_call(data, tmp_path, monkeypatch):
    # An archive from one process that met every shape (every region hot at once), shipped to a
    # cluster at the default tunables: with warm_start=True each worker installs what the archive's
    # install records list when it loads the module, so its very first call runs compiled and it
    # compiles nothing (at the defaults, tier-up alone would run the first calls interpreted).
    source = tmp_path / "source-cache"
    monkeypatch.setenv("SHAPEVM_CACHE_DIR", str(source))
    before = shapevm.get_context()
    shapevm.set_context(**SETTINGS)
    try:
        earlier = shapevm.load(MODEL, jit_level="O2", wait=True)
        with np.load(data["params"]) as p:
            for item in data["items"]:
                earlier.dense(x=item["x"], w=p["w"], b=p["b"])
        earlier.program.wait_idle()
        earlier.program.close()
    finally:
        shapevm.set_context(**{k: before[k] for k in SETTINGS})
    shapevm.export_cache(tmp_path / "archive", source)
    local, client = cluster()
    try:
        results = svd.map_model(client, MODEL, data["items"], fn="dense", params=data["params"], partition_size=4,
                                cache_archive=str(tmp_path / "archive"), warm_start=True)
        check(results, data["expected"])
        stats = svd.cluster_stats(client)
        assert stats["compiles"] == 0, stats
        for w in (w for w in stats["workers"].values() if w["partitions"]):
            assert w["warm_start"]["installed"] > 0 and w["warm_start"]["codegens"] == 0, w["warm_start"]
            assert w["first_compiled_launch_call"] == 1, w
    finally:
        client.close()
        local.close()
