"""The whole evaluation on dask GPU workers (optiml.cluster.GpuCluster), on a real cluster of worker
processes: two GPU workers (resources GPU=1, one thread each) and one without a GPU, whose GPU is the
FAKE GPU of tests/fakes_cluster.py (everything on the worker but the GPU is optiml's own code).
Routing, one ncu at a time per host, a worker killed mid-candidate, GPUs of two models, and an
optimize run on the cluster whose client is killed and resumed. None of it is GPU behaviour."""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from optiml.errors import EnvironmentProblem, UserError
from optiml.spec import Launch, load_spec
from optiml.status import Status
from optiml.verify.harness import Case, HarnessJob, KernelBinary
from tests.conftest import ROOT
from tests.fakes_cluster import FAKE_MODEL_ENV, FakeGpu, calls, setenv
from tests.test_spec import KERNEL, SPEC, write

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")

from optiml.cluster import ClusterHarness, GpuCluster  # noqa: E402
from optiml.cluster.on_worker import HOST_ENV  # noqa: E402

SMALL = SPEC.replace("timing = { N = 1048576 }", "timing = { N = 4096 }")


@pytest.fixture(scope="module")
def cluster():
    # allowed-failures 1: a task whose worker dies is sent to another worker once (as the README's scheduler)
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={"GPU": 1},
                                      dashboard_address=None) as c:
            async def cpu_worker():       # a worker without a GPU: it may build, never evaluate
                return await distributed.Nanny(c.scheduler_address, nthreads=1, name="cpu")

            nanny = c.sync(cpu_worker)
            try:
                yield c
            finally:
                c.sync(nanny.close)


@pytest.fixture(scope="module")
def client(cluster):
    with distributed.Client(cluster.scheduler_address, set_as_default=False) as c:
        c.wait_for_workers(3, timeout=60)
        yield c


@pytest.fixture
def log(tmp_path):
    d = tmp_path / "fake-gpu-log"
    d.mkdir()
    return d


def job_of(tmp_path, block: int, baseline: int | None = None) -> HarnessJob:
    kernel, spec_file = write(tmp_path, SMALL, KERNEL)
    spec = load_spec(spec_file, kernel)

    def binary(b):
        cubin = tmp_path / f"k{b}.cubin"
        cubin.write_bytes(f"FAKE CUBIN BLOCK {b}".encode())
        return KernelBinary(str(cubin), "scale", (Launch((8, 1, 1), (b, 1, 1), 0),) * len(spec.all_size_sets),
                            {"BLOCK": b})
    return HarnessJob(spec=spec, candidate=binary(block), reference=None, cases=(Case(1, 1),),
                      baseline=binary(baseline) if baseline else None, device=3)


def gpu_workers(client) -> dict[str, str]:
    """GPU worker address -> name."""
    info = client.scheduler_info()["workers"]
    return {a: str(w["name"]) for a, w in info.items() if (w.get("resources") or {}).get("GPU")}


# ------------------------------------------------------------------------------- routing

def test_candidates_go_to_the_gpu_workers_with_their_files(client, tmp_path, log):
    with GpuCluster(client, FakeGpu(str(log))) as gpus:
        assert set(gpus.workers) == set(gpu_workers(client)) and len(gpus.workers) == 2
        assert (gpus.name, gpus.arch) == ("FAKE GPU", "sm_90") and len(gpus.slots) == 4
        harness = ClusterHarness(gpus)
        jobs = [job_of(tmp_path, b) for b in (32, 64, 128, 256) * 3]
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(harness.run, jobs))
    assert [r.status for r in results] == ["ok"] * len(jobs)
    assert [r.timing.median_ms for r in results] == [j.candidate.constants["BLOCK"] / 100 for j in jobs]
    runs = [c for c in calls(log) if c["kind"] == "run"]
    assert len(runs) == len(jobs) and {c["worker"] for c in runs} <= {"0", "1"}      # never the worker "cpu"
    for c in runs:            # the cubin went along, kept on the worker under its content's hash
        sent = (tmp_path / f"k{c['block']}.cubin").read_bytes()
        assert c["sha"] == hashlib.sha256(sent).hexdigest() and c["cubin"] != str(tmp_path / f"k{c['block']}.cubin")
        assert c["device"] == 0                  # the worker's own GPU, whatever the runner's slot
    # each worker process made its GPU machinery once, and kept one path per file
    makes = [c for c in calls(log) if c["kind"] == "make"]
    assert len(makes) == len({c["pid"] for c in makes}) <= 2
    for pid in {c["pid"] for c in runs}:      # whichever worker ran a file, one path for it there
        for block in {c["block"] for c in runs if c["pid"] == pid}:
            assert len({c["cubin"] for c in runs if c["pid"] == pid and c["block"] == block}) == 1


def test_a_final_timing_with_its_baseline_is_one_job_on_one_worker(client, tmp_path, log):
    with GpuCluster(client, FakeGpu(str(log))) as gpus:
        result = ClusterHarness(gpus).run(job_of(tmp_path, 64, baseline=128))
    assert result.status == "ok" and result.baseline_timing.median_ms == 1.28 and result.timing.median_ms == 0.64
    [run] = [c for c in calls(log) if c["kind"] == "run"]
    assert run["baseline"] and run["block"] == 64


# ------------------------------------------------------------------------------- one ncu per host

def intervals(log) -> list[dict]:
    return [c for c in calls(log) if c["kind"] == "profile"]


def overlap(a: dict, b: dict) -> bool:
    return a["t0"] < b["t1"] and b["t0"] < a["t1"]


def profile_four(gpus, tmp_path) -> None:
    profiler = gpus.profiler()
    jobs = [job_of(tmp_path, b) for b in (32, 64, 128, 256)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda job: profiler.profile_batch([job], "FAKE GPU"), jobs))
    assert all(r[0].ok and r[0].metrics == {"achieved_occupancy_pct": 50.0} for r in results)


def test_profiling_is_one_ncu_at_a_time_per_host_and_parallel_across_hosts(client, tmp_path, log):
    with GpuCluster(client, FakeGpu(str(log), profile_s=0.4)) as gpus:
        profile_four(gpus, tmp_path)                   # both GPU workers on this one host
        same = intervals(log)
        assert len(same) == 4 and {c["worker"] for c in same} == {"0", "1"}
        assert len({c["host"] for c in same}) == 1
        assert not any(overlap(a, b) for i, a in enumerate(same) for b in same[i + 1:]), same
        # the workers say they are on two hosts: each host's ncu runs beside the other's
        hosts = {a: f"host-{n}" for a, n in gpu_workers(client).items()}
        for address, host in hosts.items():
            client.run(setenv, HOST_ENV, host, workers=[address])
        try:
            profile_four(gpus, tmp_path)
        finally:
            client.run(setenv, HOST_ENV, None, workers=list(hosts))
    two = intervals(log)[4:]
    assert {c["host"] for c in two} == set(hosts.values())
    assert not any(overlap(a, b) for i, a in enumerate(two) for b in two[i + 1:] if a["host"] == b["host"])
    assert any(overlap(a, b) for a in two for b in two if a["host"] != b["host"]), two


# ------------------------------------------------------------------------------- a lost worker

@pytest.mark.parametrize("kills,status", [(1, Status.OK), (2, Status.WORKER_LOST)])
def test_a_worker_killed_mid_candidate_is_requeued_once_then_the_candidate_is_worker_lost(
        client, tmp_path, log, kills, status):
    try:
        with GpuCluster(client, FakeGpu(str(log), kill=((64, kills),))) as gpus:
            result = ClusterHarness(gpus).run(job_of(tmp_path, 64))
            other = ClusterHarness(gpus).run(job_of(tmp_path, 128))      # the next candidate goes on
    finally:
        client.wait_for_workers(3, timeout=60)      # their nannies start them again
    killed = [c for c in calls(log) if c["kind"] == "killed"]
    assert len(killed) == kills and result.status == status, result
    assert other.status == "ok"
    if status == Status.WORKER_LOST:
        assert "KilledWorker" in result.message and result.timing is None
    else:
        assert [c["block"] for c in calls(log) if c["kind"] == "run"] == [64, 128]


def test_a_lost_candidate_is_neither_rewarded_nor_punished_by_the_search():
    from optiml.search import MCTS, RecordingObserver, SearchConfig
    from optiml.search.reward import reward
    from tests.test_search_mcts import ROOT as TOY, ReplayEvaluator, ScriptedProposer

    class Losing(ReplayEvaluator):
        def __init__(self, status):
            super().__init__()
            self.status = status

        def evaluate(self, source, flags):
            out = super().evaluate(source, flags)
            return {"status": self.status, "message": "lost", "median_ms": None} if "BLOCK 32" in source else out

    def search(status):
        obs = RecordingObserver()
        s = MCTS(TOY, Losing(status), ScriptedProposer(), config=SearchConfig(budget=12, seed=0), observer=obs)
        s.run()
        return s, obs

    assert reward({"status": "worker_lost"}, 1.0, 1.0) == 0.0
    lost, obs = search("worker_lost")
    punished, _ = search("harness_error")
    gone = [n for n in lost.nodes if n.status == "worker_lost"]
    assert gone and all(n.visits == 0 and n.reward == 0.0 for n in gone)
    finished = [n for n in lost.nodes if n.status not in ("pending", "running", "worker_lost")]
    assert lost.root.visits == len(finished)
    assert lost.root.value_sum == pytest.approx(sum(n.reward for n in finished))
    bad = [n for n in punished.nodes if n.status == "harness_error"]
    assert bad and all(n.visits >= 1 and n.reward < 0 for n in bad)
    # a resumed search scores the records as the live one did
    again = MCTS.from_records(obs.records, Losing("worker_lost"), ScriptedProposer(), config=SearchConfig(budget=12))
    assert [(n.visits, round(n.value_sum, 9)) for n in again.nodes] == [(n.visits, round(n.value_sum, 9)) for n in lost.nodes]


# ------------------------------------------------------------------------------- GPU models

def test_gpus_of_two_models_are_refused_in_one_sentence(client, log):
    with pytest.raises(EnvironmentProblem) as e:
        GpuCluster(client, FakeGpu(str(log), models=(("1", "FAKE GPU B"),)))
    message = str(e.value)
    assert re.fullmatch(r"the dask cluster's GPU workers have GPUs of different models \(FAKE GPU on tcp://[\d.:]+; "
                        r"FAKE GPU B on tcp://[\d.:]+\); their timings would not compare in one run, so give it "
                        r"workers of one model\.", message), message
    assert "\n" not in message and not [c for c in calls(log) if c["kind"] == "run"]


def test_gpu_workers_running_another_optiml_are_refused_in_one_sentence(client, log):
    from optiml import __version__

    with pytest.raises(EnvironmentProblem) as e:
        GpuCluster(client, FakeGpu(str(log), versions=(("1", "0.0.1"),)))
    assert str(e.value) == (f"the dask GPU workers run optiml 0.0.1, {__version__} but this is optiml {__version__}; "
                            f"install the same version on both.")


def test_a_gpu_worker_that_does_not_answer_at_the_start_is_left_out_of_the_run(client, tmp_path, log):
    workers = gpu_workers(client)
    [slow] = [a for a, n in workers.items() if n == "1"]
    with GpuCluster(client, FakeGpu(str(log), facts_s=(("1", 3.0),)), find_s=1.0) as gpus:
        assert list(gpus.workers) == [a for a in workers if a != slow]
        assert gpus.excluded == {slow: "it did not answer when the run started"}
        result = ClusterHarness(gpus).run(job_of(tmp_path, 64))
    assert result.status == "ok" and {c["worker"] for c in calls(log) if c["kind"] == "run"} == {"0"}
    time.sleep(2.5)                                 # the slow worker's answer ends before the next test
    with pytest.raises(EnvironmentProblem, match=r"^no GPU worker of the dask cluster answered within 0\.5 s\.$"):
        GpuCluster(client, FakeGpu(str(log), facts_s=(("0", 1.5), ("1", 1.5))), find_s=0.5)
    time.sleep(3.5)


def test_optimize_on_gpus_of_two_models_stops_with_that_sentence_and_no_traceback(cluster, tmp_path, log, monkeypatch):
    from click.testing import CliRunner

    import optiml.cluster.gpu_workers as gw
    from optiml.cli import main

    monkeypatch.setattr(gw, "LocalGpu", lambda timeout_s: FakeGpu(str(log), models=(("0", "FAKE GPU B"),)))
    kernel, _ = write(tmp_path, SMALL, KERNEL)
    r = CliRunner().invoke(main, ["optimize", str(kernel), "--cluster", cluster.scheduler_address, "--budget", "2",
                                  "--db", str(tmp_path / "t.db"), "--arch", "sm_90"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    [line] = r.output.strip().splitlines()
    assert line.startswith("Error: the dask cluster's GPU workers have GPUs of different models (")
    assert not (tmp_path / "t.db").exists()          # refused before a run was stored


def test_a_worker_of_another_model_that_joins_later_is_left_out(client, tmp_path, log):
    workers = gpu_workers(client)
    [late] = [a for a, n in workers.items() if n == "1"]
    with GpuCluster(client, FakeGpu(str(log))) as gpus:
        client.run(setenv, FAKE_MODEL_ENV, "FAKE GPU B", workers=[late])
        try:
            harness = ClusterHarness(gpus)
            with ThreadPoolExecutor(2) as pool:
                results = list(pool.map(harness.run, [job_of(tmp_path, b) for b in (32, 64, 128, 256) * 2]))
        finally:
            client.run(setenv, FAKE_MODEL_ENV, None, workers=[late])
    assert all(r.status == "ok" and r.device_name == "FAKE GPU" for r in results)
    assert {c["worker"] for c in calls(log) if c["kind"] == "run"} == {"0"}
    assert list(gpus.excluded) == [late] and "has a FAKE GPU B, not the run's FAKE GPU" in gpus.excluded[late]


@pytest.mark.skipif(__import__("shutil").which("nvidia-smi") is not None, reason="this host has nvidia-smi")
def test_the_real_gpu_machinery_on_a_worker_without_a_gpu_says_so_in_one_sentence(client):
    from optiml.cluster import LocalGpu

    with pytest.raises(EnvironmentProblem, match=r"^dask worker tcp://[\d.:]+ has a GPU resource but nvidia-smi "
                                                 r"names no GPU 0 there\.$"):
        GpuCluster(client, LocalGpu())


def test_no_gpu_worker_is_an_environment_problem(client):
    with pytest.raises(EnvironmentProblem, match=r"no worker with a GPU resource \(TPU\); start one per GPU with: "
                                                 r"dask worker SCHEDULER --nthreads 1 --resources GPU=1\."):
        GpuCluster(client, resources={"TPU": 1}, find_s=0.5)


# ------------------------------------------------------------------------------- optimize on the cluster

RUN = """
import sys
import optiml.cluster.gpu_workers as gw
from optiml.app.optimize import OptimizeOptions, run_optimize
from tests.fakes_cluster import FakeGpu
from pathlib import Path
gw.LocalGpu = lambda timeout_s: FakeGpu(sys.argv[1], run_s=float(sys.argv[5]))
run_optimize(OptimizeOptions(kernel=Path(sys.argv[2]), budget=int(sys.argv[3]), db=Path(sys.argv[4]), arch="sm_90",
                             cluster=sys.argv[6], parallel=2, build_jobs=1, seed=0))
"""


def optimize_here(monkeypatch, log, **kw):
    import optiml.cluster.gpu_workers as gw
    from optiml.app.optimize import OptimizeOptions, run_optimize

    monkeypatch.setattr(gw, "LocalGpu", lambda timeout_s: FakeGpu(str(log)))
    return run_optimize(OptimizeOptions(arch="sm_90", parallel=2, build_jobs=1, **kw))


def test_optimize_on_the_cluster_and_resume_after_its_client_is_killed(cluster, client, tmp_path, log, monkeypatch):
    from optiml.traces.store import TraceStore

    kernel, _ = write(tmp_path, SMALL, KERNEL)
    db = tmp_path / "t.db"
    proc = subprocess.Popen([sys.executable, "-c", RUN, str(log), str(kernel), "8", str(db), "0.4",
                             cluster.scheduler_address], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline, done = time.monotonic() + 90, []
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with TraceStore(db, read_only=True) as store:
                    runs = store.runs()
                    done = store.nodes(runs[0]["id"], "done") if runs else []
            except UserError:             # not there yet, or its tables not yet written
                pass
            if len(done) >= 3:
                break
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    assert len(done) >= 3, err.decode()[-3000:]
    with TraceStore(db, read_only=True) as store:
        run_id = store.runs()[0]["id"]
        before = {n.id: (n.status, store.evaluation(n.id)) for n in store.nodes(run_id, "done")}
        unfinished = {n.id for n in store.nodes(run_id) if n.status in ("pending", "running")}
        assert store.run(run_id)["status"] == "running"
    result = optimize_here(monkeypatch, log, resume=run_id, db=db, cluster=cluster.scheduler_address)
    with TraceStore(db, read_only=True) as store:
        nodes = store.nodes(run_id)
        after = {n.id: (n.status, store.evaluation(n.id)) for n in nodes if n.id in before}
        final = store.run(run_id)["result"]
        assert store.run(run_id)["status"] == "done"
        evaluations = [e for e in map(store.evaluation, (n.id for n in nodes)) if e and e["status"] == "ok"]
    assert after == before                           # nothing stored was evaluated again
    # what the killed run left pending or running is evaluated; nothing is left running; a node
    # still pending is a proposal the budget did not reach (a later --resume evaluates it first)
    assert not [n for n in nodes if n.id in unfinished and n.status in ("pending", "running")]
    assert not [n for n in nodes if n.status == "running"]
    fastest = min(ev["median_ms"] for ev in evaluations)          # the fake's BLOCK / 100
    assert result.evaluations == 8 and final["status"] == "ok" and final["best_ms"] == fastest < 1.28
    assert all(ev["metrics"] == {"achieved_occupancy_pct": 50.0} for ev in evaluations)     # profiled there
    assert final["sanitize"]["status"] == "clean"
    assert f"#define BLOCK {round(fastest * 100)}" in result.output.read_text()
    runs = [c for c in calls(log) if c["kind"] == "run"]
    assert runs and {c["worker"] for c in runs} <= {"0", "1"}          # GPU workers only
    finals = [c for c in runs if c["baseline"]]      # the final timing: one job, the seed its baseline
    assert finals and all(c["block"] == round(fastest * 100) for c in finals)


# ------------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
def test_gpu_optimize_on_the_cluster_with_the_workers_real_gpu_machinery(cluster, tmp_path):
    """Both GPU workers of the test cluster share this host's GPU 0: each its own persistent GPU
    child, ncu one at a time on the host, compute-sanitizer; the builds on the cluster."""
    import shutil

    from optiml.app.optimize import OptimizeOptions, run_optimize
    from optiml.traces.store import TraceStore
    from tests.conftest import EXAMPLES

    for f in ("reduce_sum.cu", "reduce_sum.toml", "ref.py", "baseline.py"):
        shutil.copy(EXAMPLES / "reduce_sum" / f, tmp_path / f)
    result = run_optimize(OptimizeOptions(kernel=tmp_path / "reduce_sum.cu", budget=6, db=tmp_path / "t.db",
                                          cluster=cluster.scheduler_address, parallel=4))
    with TraceStore(tmp_path / "t.db", read_only=True) as store:
        evaluations = [store.evaluation(n.id) for n in store.nodes(result.run_id, "done")]
    ok = [ev for ev in evaluations if ev["status"] == "ok"]
    assert result.final["status"] == "ok" and result.final["speedup"] > 0 and len(ok) >= 2, result.final
    if shutil.which("ncu"):
        assert all(ev["metrics"] for ev in ok), [ev["metrics"] for ev in ok]
    print(f"cluster run: {result.line()}", file=sys.stderr)


class _RoutingOnly:
    """A FAKE GpuCluster for routing alone: three GPU workers, calls recorded, never a dask client.
    A worker of another GPU model answers `refused` the first time it is given a job."""

    def __init__(self):
        import threading
        from optiml.cluster.gpu_workers import GpuCluster
        self.cls = GpuCluster
        self.obj = GpuCluster.__new__(GpuCluster)
        self.obj.excluded, self.obj._lock, self.obj.name, self.obj.how = {}, threading.Lock(), "NVIDIA H100", "fake"
        self.obj.gpu_workers = lambda: ["tcp://w1", "tcp://w2", "tcp://w3"]
        self.offered = []

        def _call(what, fn, *args, workers=None, cancel=None):
            self.offered.append(workers)
            if "tcp://w2" in self.obj.excluded and (workers is None or "tcp://w2" in workers):
                raise AssertionError(f"a job offered to {workers or 'any worker'} after tcp://w2 was left out")
            if workers is None or "tcp://w2" in workers:         # the scheduler may pick w2: it refuses
                return {"refused": "tcp://w2 has an NVIDIA A100, not this run's NVIDIA H100", "worker": "tcp://w2"}
            return {"worker": workers[0], "ok": True}
        self.obj._call = _call


def test_a_worker_of_another_gpu_model_is_offered_no_job_once_it_refused_one():
    r = _RoutingOnly()
    assert r.obj.call("check", None)["ok"]
    assert r.offered[0] is None and r.offered[-1] == ["tcp://w1", "tcp://w3"]
    assert r.obj.call("check", None)["ok"] and r.offered[-1] == ["tcp://w1", "tcp://w3"]   # stays left out
    assert r.obj.excluded == {"tcp://w2": "tcp://w2 has an NVIDIA A100, not this run's NVIDIA H100"}
    r.obj.gpu_workers = lambda: ["tcp://w2"]
    from optiml.cluster import _NotReturned
    with pytest.raises(_NotReturned, match="no GPU worker with a NVIDIA H100 is left"):
        r.obj.call("check", None)
