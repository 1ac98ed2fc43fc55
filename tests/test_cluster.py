"""Evaluation workers on a dask cluster (the optional dask extra), on a real LocalCluster of two
worker processes: real nvcc builds that must match local ones, GPU jobs that go to a worker and
come back, a worker that dies, and the message for a missing extra."""
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import optiml.cluster as cluster_mod
from optiml.build import NvccBuilder
from optiml.cluster import MISSING_EXTRA, DaskBuilder, DaskHarness, connect
from optiml.errors import EnvironmentProblem, UserError
from optiml.spec import Launch, find_spec, load_spec
from optiml.verify.harness import Case, HarnessJob, KernelBinary
from tests.conftest import EXAMPLES, ROOT

distributed = pytest.importorskip("distributed")   # a safety net: CI installs it with the test extra
dask = pytest.importorskip("dask")

REDUCE = EXAMPLES / "reduce_sum" / "reduce_sum.cu"
TILED = EXAMPLES / "sgemm_tiled_conflicts" / "sgemm_tiled_conflicts.cu"


@pytest.fixture(scope="module")
def cluster():
    # a task whose worker dies fails at once (the default retries it on three more workers)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as c:
            yield c


@pytest.fixture(scope="module")
def client(cluster):
    with distributed.Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture
def builder(client, tmp_path):
    return DaskBuilder(client, "sm_90", cache_dir=tmp_path / "dask-cache")


def local_build(tmp_path, source, flags=("-O3",), **kw):
    return NvccBuilder("sm_90", cache_dir=tmp_path / "local-cache").build(source, flags, **kw)


def same_log(log: str) -> str:
    """A compiler log without ptxas's compile time, which differs from one run to the next."""
    return "\n".join(ln for ln in log.splitlines() if "Compile time" not in ln)


class NoCluster:
    """Stands in for a client that must not be used."""

    def submit(self, *a, **kw):
        raise AssertionError("the cluster was contacted")


# ------------------------------------------------------------------------------- builds

@pytest.mark.parametrize("kernel", [REDUCE, TILED], ids=lambda p: p.stem)
def test_a_kernel_builds_on_the_cluster_exactly_as_it_does_here(builder, tmp_path, kernel):
    src = kernel.read_text()
    remote = builder.build(src, ("-O3",), name=kernel.name)
    local = local_build(tmp_path, src, name=kernel.name)
    assert remote.ok and local.ok, remote.log
    assert not remote.cached and builder.submitted == 1
    assert remote.key == local.key            # NvccBuilder's key: the two can share a cache
    assert (remote.status, remote.symbols, remote.resources) == (local.status, local.symbols, local.resources)
    assert same_log(remote.log) == same_log(local.log) and "registers" in remote.log
    cubin = Path(remote.cubin_path)
    assert cubin.parent == builder.cache_dir / remote.key
    assert cubin.read_bytes() == Path(local.cubin_path).read_bytes()
    assert cubin.read_bytes()[:4] == b"\x7fELF"
    assert str(cubin) in remote.command and "optiml-dask-build" not in " ".join(remote.command)
    assert json.loads((cubin.parent / "build.json").read_text())["cubin_path"] == str(cubin)


def test_a_compile_error_is_a_status_with_nvccs_error_line(builder, tmp_path):
    src = "__global__ void k(float* x) { x[0] = undefined_name; }\n"
    remote = builder.build(src, ("-O3",), name="broken.cu")
    local = local_build(tmp_path, src, name="broken.cu")
    assert remote.status == "compile_error" and remote.cubin_path is None
    assert any("broken.cu" in e and "undefined_name" in e for e in remote.errors), remote.log
    assert remote.log == local.log and remote.resources == {} and remote.symbols == {}
    # a compile error is cached, as NvccBuilder caches it
    builder.client = NoCluster()
    assert builder.build(src, ("-O3",), name="broken.cu").cached


HEADER = "#pragma once\n#define SCALE 3.0f\n__device__ inline float scaled(float v) { return SCALE * v; }\n"
USES_HEADER = '#include "scale.cuh"\n__global__ void k(float* x) { x[threadIdx.x] = scaled(x[threadIdx.x]); }\n'


def test_headers_of_the_include_folder_travel_with_the_build(builder, tmp_path):
    inc = tmp_path / "kernel-dir"
    inc.mkdir()
    (inc / "scale.cuh").write_text(HEADER)
    (inc / "notes.txt").write_text("not a header")
    without = builder.build(USES_HEADER, ("-O3",))
    assert without.status == "compile_error" and "scale.cuh" in without.log
    result = builder.build(USES_HEADER, ("-O3",), include_dir=inc)
    assert result.ok, result.log
    assert result.entry_resources("k").registers > 0
    assert str(inc) in result.command and "optiml-dask-build" not in " ".join(result.command)
    local = local_build(tmp_path, USES_HEADER, include_dir=inc)
    assert result.symbols == local.symbols and result.resources == local.resources
    # the key covers the headers' contents: an edited header is built again
    (inc / "scale.cuh").write_text(HEADER.replace("3.0f", "4.0f"))
    again = builder.build(USES_HEADER, ("-O3",), include_dir=inc)
    assert again.ok and not again.cached and again.key != result.key
    assert Path(again.cubin_path).read_bytes() != Path(result.cubin_path).read_bytes()


def test_headers_in_subfolders_travel_and_an_edit_there_builds_again(builder, tmp_path):
    """#include "detail/scale.cuh" from the kernel's folder: the nested header is shipped (with
    its folder) and keyed, so editing it builds again instead of returning the old cubin."""
    inc = tmp_path / "kernel-dir"
    (inc / "detail").mkdir(parents=True)
    (inc / "detail" / "scale.cuh").write_text(HEADER)
    src = USES_HEADER.replace('"scale.cuh"', '"detail/scale.cuh"')
    first = builder.build(src, ("-O3",), include_dir=inc)
    assert first.ok, first.log
    assert builder.build(src, ("-O3",), include_dir=inc).cached
    (inc / "detail" / "scale.cuh").write_text(HEADER.replace("3.0f", "4.0f"))
    again = builder.build(src, ("-O3",), include_dir=inc)
    assert again.ok and not again.cached and again.key != first.key
    assert Path(again.cubin_path).read_bytes() != Path(first.cubin_path).read_bytes()


def test_headers_behind_a_link_travel_by_the_name_nvcc_uses(builder, tmp_path):
    """The kernel's folder links to a library folder elsewhere: the header is shipped as
    lib/scale.cuh (its contents from the target), so the worker finds it."""
    (tmp_path / "elsewhere" / "lib").mkdir(parents=True)
    (tmp_path / "elsewhere" / "lib" / "scale.cuh").write_text(HEADER)
    inc = tmp_path / "kernel-dir"
    inc.mkdir()
    (inc / "lib").symlink_to(tmp_path / "elsewhere" / "lib")
    result = builder.build(USES_HEADER.replace('"scale.cuh"', '"lib/scale.cuh"'), ("-O3",), include_dir=inc)
    assert result.ok, result.log


def test_a_header_in_an_i_folder_elsewhere_is_keyed_though_not_shipped(builder, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "scale.cuh").write_text(HEADER)
    inc = tmp_path / "kernel-dir"
    inc.mkdir()
    flags = ("-O3", f"-I{other}")
    first = builder.key(USES_HEADER, flags, include_dir=inc)
    assert builder.key(USES_HEADER, flags, include_dir=inc) == first
    (other / "scale.cuh").write_text(HEADER.replace("3.0f", "4.0f"))
    assert builder.key(USES_HEADER, flags, include_dir=inc) != first


def test_an_error_in_a_header_names_the_header_here_not_on_the_worker(builder, tmp_path):
    inc = tmp_path / "kernel-dir"
    inc.mkdir()
    (inc / "scale.cuh").write_text(HEADER.replace("SCALE * v", "SCALE * v + not_declared"))
    result = builder.build(USES_HEADER, ("-O3",), include_dir=inc)
    assert result.status == "compile_error"
    assert any(str(inc / "scale.cuh") in e and "not_declared" in e for e in result.errors), result.log
    assert "optiml-dask-build" not in result.log


def test_too_many_header_bytes_is_a_user_error(builder, tmp_path, monkeypatch):
    (tmp_path / "big.h").write_text("// " + "x" * 2000 + "\n")
    monkeypatch.setattr(cluster_mod, "HEADER_LIMIT", 1000)
    with pytest.raises(UserError, match=re.escape(str(tmp_path))):
        builder.build(USES_HEADER, include_dir=tmp_path)


def test_builds_from_many_threads_at_once(builder):
    sources = [f"__global__ void k{i}(float* x) {{ x[threadIdx.x] += {i}.0f; }}\n" for i in range(4)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:     # every source twice: its second build waits for the first
        results = list(pool.map(lambda s: builder.build(s, ("-O3",)), sources * 2))
    wall = time.perf_counter() - t0
    assert all(r.ok for r in results), [r.log for r in results if not r.ok]
    for i, (first, second) in enumerate(zip(results[:4], results[4:])):
        assert first.key == second.key and first.cubin_path == second.cubin_path
        assert list(first.symbols) == [f"k{i}"] and Path(first.cubin_path).is_file()
    assert len({r.key for r in results}) == 4
    assert builder.submitted == 4
    print(f"8 builds of 4 sources from 8 threads on 2 workers: {wall:.2f} s", file=sys.stderr)


def test_a_second_build_is_a_local_cache_hit_without_the_cluster(builder, tmp_path):
    src = REDUCE.read_text()
    first = builder.build(src, ("-O3",))
    builder.client = NoCluster()
    second = builder.build(src, ("-O3",))
    assert second.cached and second.cubin_path == first.cubin_path and builder.submitted == 1
    assert (second.status, second.symbols, second.resources) == (first.status, first.symbols, first.resources)
    # the cache is NvccBuilder's: a local builder on the same folder finds it too
    assert NvccBuilder("sm_90", cache_dir=builder.cache_dir).build(src, ("-O3",)).cached


# ------------------------------------------------------------------------------- GPU jobs

def reduce_job(builder) -> HarnessJob:
    spec = load_spec(find_spec(REDUCE), REDUCE)
    built = builder.build(REDUCE.read_text(), spec.nvcc_flags, name=REDUCE.name)
    assert built.ok, built.log
    launches = (Launch((1, 1, 1), (256, 1, 1), 0),) * len(spec.all_size_sets)
    kb = KernelBinary(built.cubin_path, built.symbols[spec.entry], launches)
    return HarnessJob(spec=spec, candidate=kb, reference=None, cases=(Case(1, 1),))


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None,
                    reason="pycuda is installed here, so the worker's GPU child would not fail on it")
def test_a_gpu_job_goes_to_a_worker_and_back(client, builder):
    result = DaskHarness(client, timeout_s=60).run(reduce_job(builder))
    assert result.status == "harness_error" and "pycuda is not installed" in result.message, result
    assert result.stage == "initialising CUDA" and result.wall_s > 0


CHECK_CHILD = r'''
import hashlib, json, os, pickle, sys
from pathlib import Path
d = Path(sys.argv[1])
job = pickle.loads((d / "job.pkl").read_bytes())
cubin, ref = Path(job.candidate.cubin_path), Path(job.spec.reference.path)
info = {"cubin": str(cubin), "sha": hashlib.sha256(cubin.read_bytes()).hexdigest(),
        "ref": str(ref), "ref_text": ref.read_text(), "ppid": os.getppid()}
(d / "result.json").write_text(json.dumps({"status": "harness_error", "message": json.dumps(info)}))
'''


def test_a_gpu_job_carries_its_cubin_and_reference_to_the_worker(client, builder, tmp_path):
    # a stand-in GPU child (as in test_harness_parent) reports what it found on the worker
    (tmp_path / "check.py").write_text(CHECK_CHILD)
    fake = tmp_path / "fake-python"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "check.py"} "$3"\n')
    fake.chmod(0o755)
    job = reduce_job(builder)
    result = DaskHarness(client, timeout_s=60, python=str(fake)).run(job)
    assert result.status == "harness_error", result
    seen = json.loads(result.message)
    assert seen["cubin"] != job.candidate.cubin_path and seen["cubin"].endswith("kernel.cubin")
    assert seen["sha"] == hashlib.sha256(Path(job.candidate.cubin_path).read_bytes()).hexdigest()
    assert seen["ref"] != str(job.spec.reference.path) and seen["ref"].endswith("ref.py")
    assert seen["ref_text"] == job.spec.reference.path.read_text()
    workers = set(client.run(os.getpid).values())
    assert seen["ppid"] in workers and seen["ppid"] != os.getpid()


# ------------------------------------------------------------------------------- a lost worker

def test_a_worker_that_dies_is_a_status_and_the_next_build_goes_on(client, builder, monkeypatch):
    def die(*args):
        os._exit(1)

    src = "__global__ void k(float* x) { x[0] = 7; }\n"
    with monkeypatch.context() as m:
        m.setattr(cluster_mod, "_remote_build", die)
        lost = builder.build(src)
        m.setattr(cluster_mod, "_remote_run", die)
        job_lost = DaskHarness(client).run(reduce_job_stub())
    assert lost.status == "worker_lost" and "KilledWorker" in lost.log and lost.cubin_path is None
    assert lost.errors, "the pipeline shows the first error line"
    assert job_lost.status == "harness_error" and "lost the GPU job" in job_lost.message
    again = builder.build(src)        # not cached: built for real this time
    assert again.ok and not again.cached
    client.wait_for_workers(2, timeout=60)


def reduce_job_stub() -> HarnessJob:
    spec = load_spec(find_spec(REDUCE), REDUCE)
    kb = KernelBinary(str(REDUCE), "reduce_sum", (Launch((1, 1, 1), (1, 1, 1), 0),) * len(spec.all_size_sets))
    return HarnessJob(spec=spec, candidate=kb, reference=None, cases=(Case(1, 1),))


def test_a_result_that_does_not_come_back_in_time_is_a_timeout(client, tmp_path, monkeypatch):
    def slow(*args):
        time.sleep(1.5)

    builder = DaskBuilder(client, "sm_90", cache_dir=tmp_path)
    builder.wait_s = 0.3        # bounds the build only: a loaded machine may take longer over the version probe
    monkeypatch.setattr(cluster_mod, "_remote_build", slow)
    result = builder.build("__global__ void k(float* x) { x[0] = 8; }\n")
    assert result.status == "timeout" and result.wall_s < 1.5
    assert result.log.strip().splitlines()[-1] == "error: the dask cluster did not return the build within 0.3 s."
    assert not (tmp_path / result.key).exists()      # not cached


def test_workers_running_another_optiml_or_not_answering_are_one_sentence(client, tmp_path, monkeypatch):
    from optiml import __version__

    def other_version():
        return "0.0.1", "13.0.88"

    monkeypatch.setattr(cluster_mod, "_remote_versions", other_version)
    with pytest.raises(EnvironmentProblem) as e:
        DaskBuilder(client, "sm_90", cache_dir=tmp_path)
    assert str(e.value) == (f"the dask workers run optiml 0.0.1 but this is optiml {__version__}; "
                            f"install the same version on both.")

    def silent():
        time.sleep(1.5)
        return __version__, "13.0.88"

    monkeypatch.setattr(cluster_mod, "_remote_versions", silent)
    with pytest.raises(EnvironmentProblem) as e:
        DaskBuilder(client, "sm_90", cache_dir=tmp_path, wait_s=0.3)
    assert str(e.value) == ("no dask worker answered (is optiml installed on the workers?): the dask cluster did not "
                            "return a version probe within 0.3 s.")
    time.sleep(1.5)                       # the worker's sleeping probe ends before the next test


def test_a_bug_on_the_worker_raises_here(client, builder, monkeypatch):
    def bug(*args):
        raise ZeroDivisionError("a bug in optiml")

    monkeypatch.setattr(cluster_mod, "_remote_build", bug)
    with pytest.raises(ZeroDivisionError, match="a bug in optiml"):
        builder.build("__global__ void k(float* x) { x[0] = 9; }\n")


# ------------------------------------------------------------------------------- setup problems

def test_without_the_extra_the_message_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)      # `import distributed` fails
    for make in (lambda: connect("tcp://127.0.0.1:8786"), lambda: DaskBuilder("tcp://127.0.0.1:8786", "sm_90"),
                 lambda: DaskHarness("tcp://127.0.0.1:8786")):
        with pytest.raises(EnvironmentProblem) as e:
            make()
        assert str(e.value) == MISSING_EXTRA
        assert str(e.value).endswith("needs the dask extra: pip install 'optiml-kernels[dask]'")


def test_optiml_cluster_imports_without_distributed():
    code = "import sys; sys.modules['distributed'] = None; import optiml.cluster, optiml.cli; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_an_unreachable_scheduler_is_an_environment_problem():
    with pytest.raises(EnvironmentProblem, match="could not connect to the dask scheduler at 'tcp://127.0.0.1:9'"):
        connect("tcp://127.0.0.1:9", timeout_s=1)


# ------------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
def test_gpu_the_pipeline_verifies_and_times_on_the_cluster(client, tmp_path):
    from optiml.build import detect_arch
    from optiml.runner import Candidate, Runner

    seed = REDUCE.read_text()
    spec = load_spec(find_spec(REDUCE), REDUCE, kernel_source=seed)
    ev = Runner.sequential(spec, seed, DaskBuilder(client, detect_arch(), cache_dir=tmp_path), DaskHarness(client, timeout_s=120),
                   include_dir=REDUCE.parent)
    result = ev.evaluate(Candidate(seed, name=REDUCE.name))
    assert result.status == "ok", result.message
    assert result.harness.timing.median_ms > 0 and all(c.passed for c in result.harness.checks)


@pytest.mark.parametrize("name", ["../evil.h", "/etc/evil.h", "sub/../../evil.h", ""])
def test_a_worker_writes_no_shipped_header_outside_its_build_folder(name):
    """What a worker is sent is not trusted to name its own place: a header name that climbs out of
    the build's include folder, or is absolute or empty, is refused before anything is written."""
    with pytest.raises(ValueError, match="a shipped header must stay in its folder"):
        cluster_mod._remote_build("sm_90", 60.0, "__global__ void k() {}\n", ("-O3",), "k.cu", {name: b"int x;\n"})
