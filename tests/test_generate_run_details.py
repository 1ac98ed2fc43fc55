"""``run_generate`` (what ``optiml generate`` calls) start to end on this CPU machine, through the
Python API: the local scripted Chat Completions server, real nvcc builds and a real trace store,
with the FAKE GPU parts of tests/test_generate.py (median BLOCK / 100 ms) and the FAKE
compute-sanitizer of tests/test_optimize_fakes.py (a BLOCK under 64 is unsafe). It checks what a
caller sees: each step told to ``on_event``, the seeds sent with the requests, the strategies'
stored results after the search rescores them, a strategy found unsafe by the background sanitizer
reported so, and the search's default of 16 candidates in flight per GPU. None of it is GPU
behaviour."""
import pytest

from optiml.app.generate import GenerateOptions, run_generate
from optiml.traces.store import TraceStore
from tests.conftest import RUNNER_DEADLINE
from tests.fakes import fake_gpu_machine
from tests.test_generate import FakeBlockWorker, answer, kernel, spec_file
from tests.test_optimize_fakes import FakeSanitizer

from .chat_server import chat_server  # noqa: F401

pytestmark = RUNNER_DEADLINE

TWO = "STRATEGY 1: one element per thread\nx\nSTRATEGY 2: bigger blocks\ny\n"


@pytest.fixture
def fake_gpu(monkeypatch):
    fake_gpu_machine(monkeypatch, FakeBlockWorker, FakeSanitizer)
    monkeypatch.setattr(FakeSanitizer, "under", 64)
    FakeSanitizer.jobs = []
    for key in ("OPTIML_LLM_API_KEY", "OPENAI_API_KEY", "OPTIML_LLM_MODEL", "OPTIML_LLM_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)


def generate(server, tmp_path, on_event=None, **kw):
    opts = GenerateOptions(spec=spec_file(tmp_path), describe="scale a float32 vector by alpha",
                           strategies=kw.pop("strategies", 2), llm_model="scripted", llm_base_url=server.url,
                           db=tmp_path / "t.db", arch="sm_90", profile=False, build_jobs=2,
                           output=tmp_path / "best.cu", **kw)
    return run_generate(opts, on_event)


def test_each_step_of_the_generation_is_told_to_on_event(tmp_path, fake_gpu, chat_server):
    chat_server.script(TWO, answer("a", kernel(256)), answer("b", kernel(512)))
    events = []
    result = generate(chat_server, tmp_path, on_event=events.append, sanitize="off")
    texts = [e.text for e in events]
    assert texts[:3] == ["asking scripted for 2 strategies",
                         "asking for the kernel of strategy 1: one element per thread",
                         "asking for the kernel of strategy 2: bigger blocks"]
    assert "strategy 1: one element per thread: node 2 ok 2.56 ms" in texts
    assert "strategy 2: bigger blocks: node 3 ok 5.12 ms" in texts
    assert result.final["speedup"] == pytest.approx(2.0)


@pytest.mark.parametrize("seed", [1, 4])
def test_the_requests_seeds_fit_a_signed_32_bit_integer(tmp_path, fake_gpu, chat_server, seed):
    """The seed sent with each request is below 2**31, as the search's own requests' are: an
    OpenAI-compatible server that takes a signed 32-bit seed accepts every one of them."""
    chat_server.script(TWO, answer("a", kernel(256)), answer("b", kernel(512)))
    generate(chat_server, tmp_path, sanitize="off", seed=seed)
    seeds = [r.get("seed") for r in chat_server.requests]
    assert len(seeds) == 3 and all(isinstance(s, int) and 0 <= s < 2**31 for s in seeds), seeds
    assert len(set(seeds)) == 3                          # each request its own seed


def test_the_strategies_stored_results_survive_the_searchs_rescoring(tmp_path, fake_gpu, chat_server):
    """The search scores the strategies against the slowest one and stores the new rewards; each
    strategy's stored result (status, median, message) stays as its evaluation gave it."""
    chat_server.script(TWO, answer("a", kernel(256)), answer("b", kernel(512)))
    result = generate(chat_server, tmp_path, sanitize="off")
    with TraceStore(tmp_path / "t.db", create=False) as store:
        evals = {n.edit: store.evaluation(n.id) for n in store.nodes(result.run_id) if n.parent_id is not None}
    assert {edit: (e["result"].get("status"), e["result"].get("median_ms")) for edit, e in evals.items()} == {
        "strategy 1: one element per thread": ("ok", 2.56), "strategy 2: bigger blocks": ("ok", 5.12)}
    assert all(e["reward"] is not None for e in evals.values())


def test_each_strategy_is_stored_as_one_visit_when_it_is_evaluated(tmp_path, fake_gpu, chat_server):
    """The visits and value sums the store holds as each strategy's result comes (what a run killed
    then leaves): one visit and its reward for the strategy, one visit of each strategy so far for the
    description; after the search has scored them, the description's own visit too."""
    chat_server.script(TWO, answer("a", kernel(256)), answer("b", kernel(512)))
    seen = []

    def on_event(event):
        if ": node " in event.text:
            with TraceStore(tmp_path / "t.db", create=False) as store:
                nodes = store.nodes(1)
                rewards = [store.evaluation(n.id)["reward"] for n in nodes if n.status == "done"]
                seen.append([(n.visits, n.value_sum) for n in nodes if n.status == "done" or n.parent_id is None]
                            == [(len(rewards), pytest.approx(sum(rewards)))] + [(1, pytest.approx(r)) for r in rewards])
    result = generate(chat_server, tmp_path, on_event=on_event, sanitize="off")
    assert seen == [True, True]
    with TraceStore(tmp_path / "t.db", create=False) as store:
        nodes = store.nodes(result.run_id)
        rewards = {n.id: store.evaluation(n.id)["reward"] for n in nodes[1:]}
    assert [(n.visits, n.value_sum) for n in nodes[1:]] == [(1, pytest.approx(rewards[n.id])) for n in nodes[1:]]
    assert (nodes[0].visits, nodes[0].value_sum) == (1 + 2, pytest.approx(sum(rewards.values())))


def test_an_answer_that_names_no_strategy_ends_the_run_saying_so(tmp_path, fake_gpu, chat_server):
    from optiml.errors import UserError

    chat_server.script("Here are some thoughts about the kernel, but no list.\n")
    with pytest.raises(UserError) as e:
        generate(chat_server, tmp_path, sanitize="off")
    why = "the answer names no strategy (STRATEGY 1: ..., STRATEGY 2: ...)"
    assert str(e.value) == f"run 1: no strategies to write: {why}."
    with TraceStore(tmp_path / "t.db", create=False) as store:
        run = store.run(1)
    assert run["status"] == "failed" and run["result"] == {"status": "no_strategies", "message": why}


def test_a_strategy_the_background_sanitizer_finds_unsafe_is_reported_unsafe(tmp_path, fake_gpu, chat_server):
    """Strategy 1 (BLOCK 32) is the fastest, sanitized in the background (--sanitize best) after its
    result was given, and found unsafe by the FAKE sanitizer: its outcome says so, it does not
    count as verified, and the kernel written is strategy 2's."""
    chat_server.script(TWO, answer("a", kernel(32)), answer("b", kernel(256)))
    result = generate(chat_server, tmp_path, sanitize="best")
    assert 32 in FakeSanitizer.jobs
    first, second = result.strategies
    assert (first.status, second.status) == ("unsafe", "ok"), result.strategies
    assert "Invalid __global__ write" in first.message and first.median_ms is None
    assert "strategy 1 'one element per thread': node 2 unsafe (memcheck: Invalid __global__ write" in first.line()
    assert result.line().startswith(f"run {result.run_id}: 1 of 2 strategies verified")
    assert "#define BLOCK 256" in result.output.read_text()


def test_the_search_keeps_16_candidates_per_gpu_in_flight_by_default(tmp_path, fake_gpu, chat_server, monkeypatch):
    """--parallel's documented default, "16 per GPU", on two FAKE GPUs: the search is configured
    for 32 candidates in flight (a recording SearchConfig notes what the search was given)."""
    import optiml.gpus as gpus
    import optiml.search.mcts as mcts

    monkeypatch.setattr(gpus, "visible_gpus", lambda: [(0, "FAKE GPU"), (1, "FAKE GPU")])
    given = []

    class RecordingSearchConfig(mcts.SearchConfig):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            given.append(self.parallel)

    monkeypatch.setattr(mcts, "SearchConfig", RecordingSearchConfig)
    chat_server.script(TWO, answer("a", kernel(256)), answer("b", kernel(512)))
    generate(chat_server, tmp_path, sanitize="off")
    assert given == [32]
    given.clear()
    chat_server.script(TWO, answer("a", kernel(256)), answer("b", kernel(512)))
    (tmp_path / "again").mkdir()
    generate(chat_server, tmp_path / "again", sanitize="off", parallel=3)
    assert given == [3]
