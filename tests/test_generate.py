"""`optiml generate` start to end on this CPU machine: the real CLI, the real openai client against
the local scripted Chat Completions server, real nvcc builds and a real trace store, with FAKE GPU
parts (a fake GPU worker whose median is the candidate's BLOCK / 100 ms and which calls a kernel
with `#define FAKE_WRONG` wrong, a fake compute-sanitizer that finds nothing, no profiler). It checks
optiml's own wiring (strategies asked and parsed, kernels refused, repaired once, stored under the
description's root, the search going on from them, the final step, the exit codes); none of it is
GPU behaviour."""
import json

import pytest
from click.testing import CliRunner

from optiml.cli import main
from optiml.traces.store import TraceStore
from optiml.verify.harness import HarnessResult, TimingResult
from optiml.verify.sanitizer import SanitizeResult
from tests.conftest import RUNNER_DEADLINE
from tests.fakes import FakeHarness, fake_gpu_machine

from .chat_server import chat_server  # noqa: F401

pytestmark = RUNNER_DEADLINE

SPEC = """
[kernel]
entry = "scale"

[sizes]
timing = { N = 4096 }
verify = [{ N = 1000 }, { N = 77 }]

[[args]]
name = "x"
dtype = "float32"
role = "input"
shape = ["N"]

[[args]]
name = "y"
dtype = "float32"
role = "output"
shape = ["N"]

[[args]]
name = "n"
dtype = "int32"
role = "scalar"
value = "N"

[[args]]
name = "alpha"
dtype = "float32"
role = "scalar"
value = 0.5

[reference]
python = "ref.py:scale"
"""

REF = "def scale(x, n, alpha):\n    return alpha * x\n"

STRATEGIES = """Here are three ways.
**STRATEGY 1: one element per thread**
Each thread scales one element; BLOCK threads a block.
STRATEGY 2: grid-stride loop
A fixed grid of blocks strides over the array.
STRATEGY 3: float4 loads
Each thread scales four elements with one vector load.
"""


def kernel(block: int, *, body: str = "if (i < n) y[i] = alpha * x[i];", params: str | None = None,
           launch: bool = True, extra: str = "") -> str:
    params = params or "const float* __restrict__ x, float* __restrict__ y, int n, float alpha"
    line = '// optiml:launch {grid = ["cdiv(N, BLOCK)"], block = ["BLOCK"], shared_mem = 0}\n' if launch else ""
    return (f"#define BLOCK {block}\n{extra}{line}__global__ void scale({params}) {{\n"
            f"    int i = blockIdx.x * BLOCK + threadIdx.x;\n    {body}\n}}\n")


def answer(title: str, source: str) -> str:
    return f"KERNEL: {title}\nWHY: it is simple.\n```cuda\n{source}```\n"


BROKEN = kernel(64, body="if (i < n) y[i] = alpha * x[i]")           # no semicolon: nvcc refuses it
WRONG_SIGNATURE = kernel(512, params="const float* x, float* y, int n")


class FakeBlockWorker(FakeHarness):
    """A FAKE GPU worker: median BLOCK / 100 ms (the baseline's likewise); FAKE_WRONG: wrong output."""

    def __init__(self, device=0, timeout_s=120.0):
        self.device = device

    def run(self, job, lend=None):
        if "FAKE_WRONG" in job.candidate.constants:
            return HarnessResult("wrong_output", message="fake: 1000 of 1000 elements differ")

        def timing(kb):
            ms = kb.constants["BLOCK"] / 100
            return TimingResult(ms, ms, ms, ms, ms, ms, 0.0, 10, 3, 1, True)
        return HarnessResult("ok", timing=timing(job.candidate),
                             baseline_timing=timing(job.baseline) if job.baseline is not None else None)


class FakeCleanSanitizer:
    """A FAKE compute-sanitizer: every kernel is clean."""

    def __init__(self, *a, **kw):
        pass

    def sanitize(self, job, gpu_lock=None, cancel=None):
        return SanitizeResult("clean", "passed memcheck", tools=("memcheck",), wall_s=0.01)


def fake_parts(monkeypatch, worker, sanitizer) -> None:
    """The FAKE GPU machine with ``worker`` and ``sanitizer``, and no LLM setting from the environment."""
    fake_gpu_machine(monkeypatch, worker, sanitizer)
    for key in ("OPTIML_LLM_API_KEY", "OPENAI_API_KEY", "OPTIML_LLM_MODEL", "OPTIML_LLM_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture
def fake_gpu(monkeypatch):
    fake_parts(monkeypatch, FakeBlockWorker, FakeCleanSanitizer)


def spec_file(tmp_path, text: str = SPEC):
    (tmp_path / "ref.py").write_text(REF)
    spec = tmp_path / "scale.toml"
    spec.write_text(text)
    return spec


def generate(server, tmp_path, *args):
    db = tmp_path / "t.db"
    r = CliRunner().invoke(main, ["generate", str(spec_file(tmp_path)), "--describe", "scale a float32 vector by alpha",
                                  "--llm-model", "scripted", "--llm-base-url", server.url, "--db", str(db),
                                  "--arch", "sm_90", "--no-profile", "--jobs", "2", *args])
    return r, db


def prompt(server, i: int) -> str:
    return server.requests[i]["messages"][-1]["content"]


def test_strategies_kernels_a_repair_and_a_refusal_under_the_description(tmp_path, fake_gpu, chat_server):
    chat_server.script(STRATEGIES, answer("one per thread", kernel(256)), answer("grid stride", BROKEN),
                       answer("vector", WRONG_SIGNATURE), answer("vector, fixed", kernel(512)),
                       answer("grid stride, fixed", kernel(128)))
    r, db = generate(chat_server, tmp_path, "--strategies", "3", "-o", str(tmp_path / "best.cu"))
    assert r.exit_code == 0, r.output
    assert len(chat_server.requests) == 6
    assert "Name 3 distinct implementation strategies" in prompt(chat_server, 0)
    assert "`__global__ void scale(const float* __restrict__ x, float* __restrict__ y, int n, float alpha)`" \
        in prompt(chat_server, 0) and "return alpha * x" in prompt(chat_server, 0)       # signature and reference
    assert "one element per thread" in prompt(chat_server, 1) and "grid-stride loop" in prompt(chat_server, 2)
    # strategy 3's wrong signature is refused with one sentence, shown to the model for its one repair
    refusal = ("the entry scale takes 3 parameters (x, y, n) but the spec gives 4 (x, y, n, alpha); it must be "
               "`__global__ void scale(const float* __restrict__ x, float* __restrict__ y, int n, float alpha)`.")
    assert refusal in prompt(chat_server, 4) and "## What happened: edit_failed" in prompt(chat_server, 4)
    # strategy 2's compile error is shown to the model, which repairs it once
    assert "## What happened: compile_error" in prompt(chat_server, 5) and "expected a \";\"" in prompt(chat_server, 5)
    with TraceStore(db, create=False) as store:
        run = store.run(1)
        nodes = store.nodes(1)
        root = nodes[0]
        evals = {n.id: store.evaluation(n.id) for n in nodes}
        kids = {n.edit: (evals[n.id]["status"], evals[n.id]["median_ms"]) for n in nodes if n.parent_id == root.id}
        attempts = [p for p in store.proposals(run_id=1) if p["kind"] == "attempt"]
        exchanges = [p for p in store.proposals(run_id=1) if p["kind"] == "exchange"]
        best_text = store.source(store.node(run["result"]["best_node"]).source_hash)
    assert root.proposer == "description" and root.rationale == "scale a float32 vector by alpha"
    assert evals[root.id]["status"] == "source_error" and "not a kernel" in evals[root.id]["result"]["message"]
    assert kids == {"strategy 1: one element per thread": ("ok", 2.56),
                    "strategy 2: grid-stride loop": ("compile_error", None),
                    "strategy 2: grid-stride loop (repaired)": ("ok", 1.28),
                    "strategy 3: float4 loads (repaired)": ("ok", 5.12)}
    assert len(attempts) == 1 and attempts[0]["error"] == refusal
    assert attempts[0]["parsed_edits"]["edit"] == "strategy 3: float4 loads"
    assert len(exchanges) == 6 and all(x["prompt"] and x["raw_answer"] and x["tokens_in"] for x in exchanges)
    assert [s["name"] for s in exchanges[0]["parsed_edits"]["strategies"]] == [
        "one element per thread", "grid-stride loop", "float4 loads"]
    # the final figure: the fastest verified strategy, timed against the slowest (fake timings)
    final = run["result"]
    assert final["status"] == "ok" and final["slowest_strategy_node"] == 4
    assert final["seed_ms"] == 5.12 and final["best_ms"] == 1.28 and final["speedup"] == pytest.approx(4.0)
    assert "#define BLOCK 128" in best_text and run["status"] == "done"
    written = (tmp_path / "best.cu").read_text()
    assert "4.00x over the slowest verified strategy" in written and written.endswith(best_text)
    assert "strategy 2 'grid-stride loop': node 5 ok 1.28 ms after one repair" in r.output
    assert "run 1: 3 of 3 strategies verified, 4 candidates; best 4.00x over the slowest verified strategy" in r.output
    # the viewing commands work on the run
    shown = CliRunner().invoke(main, ["show", "1", "--db", str(db)])
    assert shown.exit_code == 0 and "strategy 2: grid-stride loop (repaired)" in shown.output, shown.output
    assert ("strategies:\n  node 2: ok, 2.56 ms  strategy 1: one element per thread\n"
            "  node 3: compile_error, -  strategy 2: grid-stride loop\n") in shown.output
    assert "root: node 1, the description (not a kernel)" in shown.output
    assert "timed interleaved with the slowest verified strategy (node 4)" in shown.output
    out = tmp_path / "again.cu"
    best = CliRunner().invoke(main, ["best", "1", "--db", str(db), "-o", str(out)])
    assert best.exit_code == 0 and out.read_text().endswith(best_text)
    exported = CliRunner().invoke(main, ["export", "1", "--db", str(db), "-o", "-", "--format", "json"])
    assert exported.exit_code == 0 and len(json.loads(exported.output)) == 5


def test_no_verified_kernel_is_a_clear_failure(tmp_path, fake_gpu, chat_server):
    chat_server.script("STRATEGY 1: naive\none per thread\n",
                       answer("naive", kernel(128, extra="#define FAKE_WRONG 1\n")),
                       answer("naive, fixed", kernel(128, launch=False)))
    r, db = generate(chat_server, tmp_path, "--strategies", "1", "--sanitize", "off")
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert ("Error: run 1: none of the 1 strategies gave a verified kernel (naive: edit_failed); see optiml show 1"
            in r.output), r.output
    assert "## What happened: wrong_output" in prompt(chat_server, 2)
    with TraceStore(db, create=False) as store:
        run = store.run(1)
        attempt = [p for p in store.proposals(run_id=1) if p["kind"] == "attempt"][0]
    assert run["status"] == "failed" and run["result"]["status"] == "no_verified_kernel"
    assert attempt["error"].startswith("the kernel has no // optiml:launch line")


def test_a_kernel_the_same_as_another_strategys_is_refused_and_repaired(tmp_path, fake_gpu, chat_server):
    """Asked for three strategies, the model names two; the second's kernel is the first's again (a
    comment aside): refused with its sentence, shown to the model for its one repair."""
    chat_server.script("STRATEGY 1: one per thread\nx\nSTRATEGY 2: wider blocks\ny\n",
                       answer("a", kernel(256)), answer("b", "// the same\n" + kernel(256)),
                       answer("b, fixed", kernel(512)))
    r, db = generate(chat_server, tmp_path, "--strategies", "3", "--sanitize", "off")
    assert r.exit_code == 0, r.output
    assert "the model named 2 strategies of the 3 asked for" in r.output
    refusal = "the kernel is the same as one already generated for another strategy."
    assert refusal in prompt(chat_server, 3) and len(chat_server.requests) == 4
    with TraceStore(db, create=False) as store:
        attempts = [p for p in store.proposals(run_id=1) if p["kind"] == "attempt"]
        kids = {n.edit: store.evaluation(n.id)["status"] for n in store.nodes(1) if n.depth == 1}
    assert [a["error"] for a in attempts] == [refusal]
    assert kids == {"strategy 1: one per thread": "ok", "strategy 2: wider blocks (repaired)": "ok"}


def test_then_optimize_searches_on_from_the_strategies_and_resumes(tmp_path, fake_gpu, chat_server):
    chat_server.script("STRATEGY 1: block per chunk\nx\nSTRATEGY 2: bigger blocks\ny\n",
                       answer("a", kernel(256)), answer("b", kernel(512)))
    r, db = generate(chat_server, tmp_path, "--strategies", "2", "--then-optimize", "--budget", "5",
                     "--proposer", "rules", "--sanitize", "off", "--parallel", "1")
    assert r.exit_code == 0, r.output
    with TraceStore(db, create=False) as store:
        nodes = store.nodes(1)
        final = store.run(1)["result"]
    root = nodes[0]
    assert len(chat_server.requests) == 3                       # the search's rules asked no model
    assert [n.edit for n in nodes if n.parent_id == root.id] == ["strategy 1: block per chunk",
                                                                   "strategy 2: bigger blocks"]
    assert len(nodes) == 6 and all(n.depth >= 2 for n in nodes[3:])      # the search edited the strategies
    assert final["slowest_strategy_node"] == nodes[2].id and final["best_node"] != nodes[1].id
    assert final["speedup"] > 2.0                                  # BLOCK 512 -> a smaller one (fake timings)
    r2 = CliRunner().invoke(main, ["generate", "--resume", "1", "--budget", "7", "--db", str(db), "--arch", "sm_90",
                                   "--no-profile", "--llm-model", "scripted", "--llm-base-url", chat_server.url])
    assert r2.exit_code == 0, r2.output
    with TraceStore(db, create=False) as store:
        # the description and 7 evaluated (an expansion may leave a proposed child pending for a resume)
        assert len([n for n in store.nodes(1) if n.status in ("done", "failed")]) == 8
        assert len(chat_server.requests) == 3
    r3 = CliRunner().invoke(main, ["optimize", "--resume", "1", "--db", str(db), "--arch", "sm_90", "--no-profile"])
    assert r3.exit_code != 0 and "is an optiml generate run" in r3.output and "optiml generate --resume 1" in r3.output
    assert "Traceback" not in r3.output


def test_bad_input_is_one_sentence(tmp_path, fake_gpu, chat_server):
    spec = spec_file(tmp_path)
    r = CliRunner().invoke(main, ["generate", str(spec), "--llm-model", "m", "--db", str(tmp_path / "t.db")])
    assert r.exit_code == 1 and "Error: --describe is required" in r.output and not (tmp_path / "t.db").exists()
    seeded = spec_file(tmp_path, SPEC.replace('[reference]\npython = "ref.py:scale"\n', ""))
    r = CliRunner().invoke(main, ["generate", str(seeded), "--describe", "x", "--llm-model", "m", "--db",
                                  str(tmp_path / "t.db")])
    assert r.exit_code == 1 and "needs [reference] python = 'file.py:function'" in r.output
    r = CliRunner().invoke(main, ["generate", str(spec), "--describe", "x", "--llm-model", "m", "--db",
                                  str(tmp_path / "t.db"), "--llm-base-url", chat_server.url, "--strategies", "0"])
    assert r.exit_code == 1 and "--strategies must be between 1 and 12, not 0." in r.output


def test_the_search_never_asks_to_edit_the_description(tmp_path, fake_gpu, chat_server):
    edit = "EDIT: smaller block {0}\nWHY: more blocks.\n<<<<<<< SEARCH\n#define BLOCK 256\n=======\n#define BLOCK {0}\n>>>>>>> REPLACE\n"
    chat_server.script("STRATEGY 1: one per thread\nx\n", answer("a", kernel(256)), edit.format(128),
                       edit.format(64), edit.format(32), edit.format(16))
    r, db = generate(chat_server, tmp_path, "--strategies", "1", "--then-optimize", "--budget", "3",
                     "--sanitize", "off", "--parallel", "1")
    assert r.exit_code == 0, r.output
    asked = [prompt(chat_server, i) for i in range(2, len(chat_server.requests))]
    assert asked and all("## Current source\n```cuda\n#define BLOCK 256" in p for p in asked)
    assert not any("optiml generate: the task's description" in p for p in asked)
    with TraceStore(db, create=False) as store:
        final = store.run(1)["result"]
        assert [n.proposer for n in store.nodes(1)] == ["description", "generate", "llm", "llm"]
    assert final["best_ms"] == 0.64 and final["seed_ms"] == 2.56        # fake timings


class FakeSanitizerUnsafeAt128:
    """A FAKE compute-sanitizer: a kernel with BLOCK 128 writes out of bounds; every other is clean."""
    checks: list = []

    def __init__(self, *a, **kw):
        pass

    def sanitize(self, job, gpu_lock=None, cancel=None):
        block = job.candidate.constants.get("BLOCK")
        FakeSanitizerUnsafeAt128.checks.append(block)
        if block == 128:
            return SanitizeResult("unsafe", "memcheck: Invalid __global__ write of size 4 (fake)", tools=("memcheck",))
        return SanitizeResult("clean", "passed memcheck", tools=("memcheck",), wall_s=0.01)


@pytest.mark.parametrize("blocks, said", [
    ((256, 128), None), ((128, 256), None),
    ((128,), "run 1: none of the 1 strategies gave a verified kernel (block of 128: unsafe)"),
], ids=["slower_first", "unsafe_first", "none_safe"])
def test_the_fastest_strategy_unsafe_under_the_sanitizer_is_never_the_kernel_written(
        tmp_path, monkeypatch, chat_server, blocks, said):
    """Generate with the sanitizer on each new best: the fastest verified strategy (BLOCK 128) is
    unsafe, so the kernel written is the safe one, whichever came first; with none safe, one
    sentence and no file. FAKE GPU parts."""
    fake_parts(monkeypatch, FakeBlockWorker, FakeSanitizerUnsafeAt128)
    monkeypatch.setattr(FakeSanitizerUnsafeAt128, "checks", [])
    names = "".join(f"STRATEGY {i}: block of {b}\none per thread\n" for i, b in enumerate(blocks, 1))
    chat_server.script(names, *(answer(f"block of {b}", kernel(b)) for b in blocks))
    out = tmp_path / "best.cu"
    r, db = generate(chat_server, tmp_path, "--strategies", str(len(blocks)), "-o", str(out), "--parallel", "1")
    with TraceStore(db, create=False) as store:
        statuses = {store.source(n.source_hash).splitlines()[0]: store.evaluation(n.id)["status"]
                    for n in store.nodes(1)[1:]}
    assert statuses["#define BLOCK 128"] == "unsafe" and 128 in FakeSanitizerUnsafeAt128.checks, statuses
    if said is not None:
        assert r.exit_code == 1 and "Traceback" not in r.output and not out.exists()
        assert said in r.output, r.output
    else:
        assert r.exit_code == 0, r.output
        assert "#define BLOCK 256" in out.read_text() and "#define BLOCK 128" not in out.read_text()
        assert statuses["#define BLOCK 256"] == "ok" and "sanitize: passed memcheck" in r.output


class WrongOnFreshInputsAt128(FakeBlockWorker):
    """The FAKE worker, but BLOCK 128 is wrong in the final job (timed with a baseline, on fresh inputs)."""

    def run(self, job, lend=None):
        if job.baseline is not None and job.candidate.constants.get("BLOCK") == 128:
            return HarnessResult("wrong_output", message="fake: 5 of 4096 elements differ")
        return super().run(job, lend)


def test_the_fastest_strategy_wrong_in_the_final_re_verification_is_not_the_kernel_written(
        tmp_path, monkeypatch, chat_server):
    fake_parts(monkeypatch, WrongOnFreshInputsAt128, FakeCleanSanitizer)
    chat_server.script("STRATEGY 1: wide\none per thread\nSTRATEGY 2: narrow\none per thread\n",
                       answer("wide", kernel(256)), answer("narrow", kernel(128)))
    out = tmp_path / "best.cu"
    r, db = generate(chat_server, tmp_path, "--strategies", "2", "-o", str(out), "--parallel", "1")
    assert r.exit_code == 0, r.output
    assert "#define BLOCK 256" in out.read_text()
    with TraceStore(db, create=False) as store:
        narrow = [store.evaluation(n.id) for n in store.nodes(1) if "#define BLOCK 128" in store.source(n.source_hash)]
    assert [e["status"] for e in narrow] == ["wrong_output"]
    assert narrow[0]["result"]["message"] == ("wrong in the final re-verification on fresh inputs: fake: 5 of 4096 "
                                             "elements differ")
