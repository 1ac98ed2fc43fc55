"""The search with the real LLM proposer (through the openai SDK, against the local scripted
Chat Completions server) and a fake evaluator (named as one: it 'verifies' any source that
still has the kernel and reports a time by the padding it finds), writing to a real trace store:
every exchange is stored with its prompt, answer, tokens and latency, and the node it produced
points at it; a failed edit is stored as an attempt the model is told about next time."""

from click.testing import CliRunner

from optiml.cli import main
from optiml.edits.llm import LLMProposer
from optiml.edits.mixed import MixedProposer
from optiml.edits.rules import RulesProposer
from optiml.search import MCTS, SearchConfig, normalize_source
from optiml.app.records import StoreObserver
from optiml.traces.store import TraceStore

from .chat_server import Reply, chat_server  # noqa: F401
from .test_edits_llm import MISS, NAME, PAD, SOURCE


class FakePaddingEvaluator:
    """A fake: ok for every source with the entry kernel; 80 ms, or 15 ms once Bs is padded."""

    def __init__(self):
        self.calls = 0

    def evaluate(self, source, flags):
        self.calls += 1
        if f"void {NAME}(" not in source:
            return {"status": "compile_error", "message": "no kernel"}
        ms = 15.0 if "Bs[TILE][TILE + 1]" in normalize_source(source) else 80.0   # comments aside
        return {"status": "ok", "median_ms": ms, "spread": 0.01, "metrics": {}, "diagnosis": []}


def test_llm_exchanges_land_in_the_store_and_failures_reach_the_next_prompt(tmp_path, chat_server):
    chat_server.script(Reply(MISS), Reply(PAD), Reply(MISS), Reply(MISS))
    prop = LLMProposer(model="scripted-model", base_url=chat_server.url, api_key="x", timeout_s=5, max_retries=0)
    store = TraceStore(tmp_path / "t.db")
    run = store.start_run(NAME)
    ev = FakePaddingEvaluator()
    m = MCTS(SOURCE, ev, prop, config=SearchConfig(budget=1, k_w=1.0), observer=StoreObserver(store, run, ev),
             task="toy", entry=NAME)
    best = m.run()
    assert m.root.median_ms == 80.0 and best.median_ms == 15.0 and best.reward > 1 and "Bs[TILE][TILE + 1]" in best.source
    # request 1 failed to apply: stored as an attempt and as an exchange; request 2 made node 2
    exchanges = [p for p in store.proposals(run_id=run) if p["kind"] == "exchange"]
    attempts = [p for p in store.proposals(run_id=run) if p["kind"] == "attempt"]
    assert len(exchanges) == 2 and len(attempts) == 1
    assert all(x["model"] == "scripted-model" and x["prompt"] and x["raw_answer"] and x["tokens_in"] > 0
               and x["tokens_out"] > 0 and x["latency_s"] > 0 for x in exchanges)
    assert "matches nothing" in attempts[0]["error"]
    node = [n for n in store.nodes(run) if n.parent_id is not None][0]
    assert node.proposer == "llm" and node.proposal_id == exchanges[1]["id"]
    assert exchanges[1]["raw_answer"].startswith("EDIT: pad Bs")
    # the second request was told that the first SEARCH block did not match
    assert "did not match" in chat_server.requests[1]["messages"][-1]["content"]
    r = CliRunner().invoke(main, ["show", str(run), "--node", str(node.id), "--db", str(tmp_path / "t.db")])
    assert r.exit_code == 0 and "scripted-model" in r.output and "EDIT: pad Bs" in r.output, r.output
    store.close()


def test_mixed_proposer_puts_rules_and_llm_edits_in_one_tree(chat_server):
    chat_server.script(*[Reply(PAD)] * 4)
    llm = LLMProposer(model="m", base_url=chat_server.url, api_key="x", timeout_s=5, max_retries=0)
    m = MCTS(SOURCE, FakePaddingEvaluator(), MixedProposer([RulesProposer(), llm]),
             config=SearchConfig(budget=4), entry=NAME)
    m.run()
    assert {"rules", "llm"} <= {n.proposer for n in m.nodes}
