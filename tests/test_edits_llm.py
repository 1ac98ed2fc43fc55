"""The llm proposer against a real local Chat Completions server, through the real openai SDK."""
import json
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from optiml.build import NvccBuilder
from optiml.edits.llm import LLMConfig, LLMProposer
from optiml.edits.types import Attempt, NodeView
from optiml.errors import UserError

from .chat_server import ChatServer, Delay, Fail, Reply, chat_server, tokens  # noqa: F401
from .conftest import EXAMPLES, ROOT

NAME = "sgemm_tiled_conflicts"
SOURCE = (EXAMPLES / NAME / f"{NAME}.cu").read_text()
PAD = """EDIT: pad Bs to [TILE][TILE + 1]
WHY: Bs is read down a column, a 32-way bank conflict; one column of padding removes it.

```cuda
<<<<<<< SEARCH
    __shared__ float Bs[TILE][TILE];
=======
    __shared__ float Bs[TILE][TILE + 1];
>>>>>>> REPLACE
```
"""
MISS = """EDIT: unroll the inner loop
WHY: fewer branches.
<<<<<<< SEARCH
    __shared__ float As[TILE][TILE];
=======
    __shared__ float As[TILE][TILE];
>>>>>>> REPLACE
<<<<<<< SEARCH
        for (int kk = 0; kk < TILE; ++kk) {
=======
        #pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
>>>>>>> REPLACE
"""


@dataclass
class Metric:                      # a metric object with .value, as some callers pass
    value: object


def view(**kw) -> NodeView:
    base = dict(source=SOURCE, flags=("-O3",), entry=NAME, median_ms=84.7,
                task="C = A * B, float32, M = N = K = 4096; launch grid [cdiv(N, TILE), cdiv(M, TILE)], block [TILE, TILE]",
                resources={"registers": 38, "smem_static": 8192, "spill_stores": 0},
                metrics={"smem_ld_bank_conflicts": 1.9e9, "achieved_occupancy_pct": Metric(98.6),
                         "occupancy_limiters": "warps", "not_a_shown_key": 1.0},
                diagnosis=("Shared-memory loads have 31-way bank conflicts.",))
    return NodeView(**(base | kw))


def proposer(server: ChatServer, **kw) -> LLMProposer:
    return LLMProposer(**({"model": "scripted-coder", "base_url": server.url, "timeout_s": 5.0,
                           "max_retries": 0} | kw))


def user_text(request: dict) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@needs_nvcc
def test_a_well_formed_answer_becomes_a_proposal_that_builds(chat_server, tmp_path):
    chat_server.script(PAD)
    [p] = proposer(chat_server).propose(view(), 1, random.Random(7))
    assert p.error is None
    assert p.edit == "pad Bs to [TILE][TILE + 1]" and p.proposer == "llm" and p.prior == 1.0
    assert p.rationale.startswith("Bs is read down a column")
    assert p.flags == ("-O3",)
    assert "\n    __shared__ float Bs[TILE][TILE + 1];\n" in p.source
    assert "\n    __shared__ float Bs[TILE][TILE];\n" not in p.source
    r = NvccBuilder("sm_90", cache_dir=tmp_path).build(p.source, p.flags)
    assert r.ok, r.log

    ex = p.exchange
    assert ex["model"] == "scripted-coder" and ex["raw_answer"] == PAD and ex["error"] is None
    assert json.loads(ex["prompt"]) == chat_server.requests[0]["messages"]
    assert ex["tokens_in"] == chat_server.served[0]["usage"]["prompt_tokens"] > 1000
    assert ex["tokens_out"] == tokens(PAD)
    assert 0 < ex["latency_s"] < 5
    assert ex["parsed_edits"] == [{"kind": "block", "index": 1, "search": "    __shared__ float Bs[TILE][TILE];",
                                   "replace": "    __shared__ float Bs[TILE][TILE + 1];"}]

    [req] = chat_server.requests
    assert req["model"] == "scripted-coder" and "n" not in req
    assert isinstance(req["seed"], int) and req["temperature"] == 0.7 and req["max_tokens"] == 4096


def test_the_prompt_carries_the_node(chat_server):
    chat_server.script(PAD)
    attempts = (Attempt("unroll k", "ok", speedup=1.25), Attempt("BLOCK 16 -> 32", "wrong_output", "max abs error 3.2"),
                Attempt("llm: (request failed)", "edit_failed", "llm request failed: HTTP 503: busy"))
    proposer(chat_server).propose(view(attempts=attempts), 1, random.Random(1))
    [req] = chat_server.requests
    system = req["messages"][0]["content"]
    assert req["messages"][0]["role"] == "system"
    for rule in ("name and parameter list", "tolerance", "// optiml:launch {grid = [",
                 "<<<<<<< SEARCH", "EDIT:", "WHY:", "ONE edit"):
        assert rule in system
    user = user_text(req)
    for fact in ("M = N = K = 4096", f"`{NAME}`", SOURCE.rstrip("\n"), "84.7 ms", "registers 38",
                 "smem_static 8,192", "smem_ld_bank_conflicts: 1.9e+09", "achieved_occupancy_pct: 98.6",
                 "occupancy_limiters: warps", "31-way bank conflicts", "-O3",
                 '1. "unroll k" -> ok, 1.25x faster', '2. "BLOCK 16 -> 32" -> wrong_output: max abs error 3.2'):
        assert fact in user, fact
    assert "not_a_shown_key" not in user and "request failed" not in user


def test_a_malformed_answer_is_an_edit_failed_proposal_with_its_exchange(chat_server):
    chat_server.script("You should pad the Bs array by one column to avoid bank conflicts.")
    [p] = proposer(chat_server).propose(view(), 1, random.Random(1))
    assert p.error.startswith("the answer holds no SEARCH/REPLACE block")
    assert p.source == SOURCE and p.flags == ("-O3",) and p.proposer == "llm"
    assert p.exchange["error"] == p.error
    assert p.exchange["raw_answer"].startswith("You should pad")
    assert p.exchange["tokens_out"] is not None


def test_a_search_that_misses_is_named_and_shown_in_the_next_prompt(chat_server):
    chat_server.script(MISS, PAD)
    llm = proposer(chat_server)
    [p] = llm.propose(view(), 1, random.Random(1))
    assert p.error == ("SEARCH block 2 (starting 'for (int kk = 0; kk < TILE; ++kk) {') matches nothing in "
                       "the source; copy its lines exactly from the current source")
    assert p.edit == "unroll the inner loop" and p.source == SOURCE

    # the search stores it as an edit_failed attempt; the next request for the node shows it
    failed = Attempt(edit=p.edit, status="edit_failed", message=p.error)
    [q] = llm.propose(view(attempts=(failed,)), 1, random.Random(2))
    assert q.error is None
    user = user_text(chat_server.requests[1])
    assert '1. "unroll the inner loop" -> edit_failed: SEARCH block 2' in user
    assert "the SEARCH text of attempt 1 did not match the current source" in user
    assert "did not match" not in user_text(chat_server.requests[0])


def test_a_timeout_is_an_error_proposal_and_ends_the_round_quickly(chat_server):
    chat_server.script(Delay(10.0), PAD, PAD)
    start = time.monotonic()
    ps = proposer(chat_server, timeout_s=1.0, max_retries=0).propose(view(), 3, random.Random(1))
    assert time.monotonic() - start < 4
    [p] = ps
    assert p.error == "llm request failed: no answer within the 1 s timeout"
    assert p.source == SOURCE and p.exchange["error"] == p.error and p.exchange["raw_answer"] is None
    assert p.exchange["tokens_in"] is None and 1.0 <= p.exchange["latency_s"] < 4
    assert len(chat_server.requests) == 1


def test_the_sdk_retries_a_500_once_and_succeeds(chat_server):
    chat_server.script(Fail(500), PAD)
    [p] = proposer(chat_server, max_retries=1).propose(view(), 1, random.Random(1))
    assert p.error is None and "[TILE][TILE + 1];" in p.source
    assert len(chat_server.requests) == 2
    assert chat_server.requests[0]["messages"] == chat_server.requests[1]["messages"]


def test_a_500_without_retries_left_is_an_error_proposal(chat_server):
    chat_server.script(Fail(500, "model overloaded"), PAD)
    ps = proposer(chat_server, max_retries=0).propose(view(), 2, random.Random(1))
    assert [p.error for p in ps] == ["llm request failed: HTTP 500: model overloaded"]
    assert len(chat_server.requests) == 1


def test_an_unreachable_server_is_an_error_proposal():
    server = ChatServer()                     # bound, never started, then closed
    url = server.url
    server._server.server_close()
    [p] = LLMProposer("m", base_url=url, timeout_s=1.0, max_retries=0).propose(view(), 2, random.Random(1))
    assert p.error.startswith("llm request failed: cannot reach the server")


def test_k_requests_one_edit_each_with_the_round_so_far_in_the_prompt(chat_server):
    second = PAD.replace("EDIT: pad Bs to [TILE][TILE + 1]", "EDIT: pad Bs again")
    chat_server.script(PAD, Reply(second, usage=False), "no blocks here")
    ps = proposer(chat_server).propose(view(), 3, random.Random(5))
    assert len(chat_server.requests) == 3 and len(ps) == 3
    assert [p.edit for p in ps[:2]] == ["pad Bs to [TILE][TILE + 1]", "pad Bs again"]
    assert ps[0].error is None and ps[1].error is None and ps[2].error is not None
    assert ps[1].exchange["tokens_in"] is None and ps[1].exchange["tokens_out"] is None
    assert ps[0].exchange is not ps[1].exchange
    assert "Proposed in this round" not in user_text(chat_server.requests[0])
    assert "- pad Bs to [TILE][TILE + 1]\n- pad Bs again" in user_text(chat_server.requests[2])
    assert len({r["seed"] for r in chat_server.requests}) == 3
    assert all("n" not in r for r in chat_server.requests)


def test_odd_answers(chat_server):
    chat_server.script(Reply("", finish_reason="stop"),
                       Reply(PAD.split("=======")[0], finish_reason="length"),
                       "<think>maybe <<<<<<< SEARCH here</think>\n" + PAD,
                       PAD.replace("[TILE][TILE + 1];", "[TILE][TILE];"))
    ps = proposer(chat_server).propose(view(), 4, random.Random(1))
    assert ps[0].error == "the model returned an empty answer"
    assert ps[1].error.endswith("(the answer was cut off at max_tokens=4096)")
    assert ps[2].error is None
    assert ps[3].error.startswith("the edit leaves the source unchanged")
    assert proposer(chat_server).propose(view(), 0, random.Random(1)) == []
    assert len(chat_server.requests) == 4


def test_fallback_title_without_an_edit_line(chat_server):
    chat_server.script(PAD.split("\n", 2)[2])
    [p] = proposer(chat_server).propose(view(), 1, random.Random(1))
    assert p.edit == "llm: __shared__ float Bs[TILE][TILE + 1];" and p.rationale == ""


def test_config_from_env():
    env = {"OPTIML_LLM_MODEL": "gpt-x", "OPENAI_API_KEY": "sk-secret"}
    c = LLMConfig.from_env(env)
    assert (c.model, c.base_url, c.api_key, c.max_retries, c.timeout_s) == ("gpt-x", None, "sk-secret", 2, 120.0)
    assert "sk-secret" not in repr(c)
    assert LLMConfig.from_env(env | {"OPTIML_LLM_API_KEY": "k2"}).api_key == "k2"
    local = LLMConfig.from_env({"OPTIML_LLM_MODEL": "qwen", "OPENAI_BASE_URL": "http://localhost:11434/v1"})
    assert (local.base_url, local.api_key) == ("http://localhost:11434/v1", "not-needed")
    assert LLMConfig.from_env({"OPTIML_LLM_MODEL": "q", "OPTIML_LLM_BASE_URL": "http://a/v1",
                               "OPENAI_BASE_URL": "http://b/v1"}).base_url == "http://a/v1"
    with pytest.raises(UserError, match="set OPTIML_LLM_API_KEY"):
        LLMConfig.from_env({"OPTIML_LLM_MODEL": "gpt-x"})
    with pytest.raises(UserError, match="set OPTIML_LLM_MODEL"):
        LLMConfig.from_env({"OPENAI_API_KEY": "k"})
    assert LLMConfig.from_env(env, timeout_s=3.0, model="other").timeout_s == 3.0


def test_proposer_from_config_talks_to_the_server(chat_server):
    chat_server.script(PAD)
    cfg = LLMConfig.from_env({"OPTIML_LLM_MODEL": "cfg-model", "OPTIML_LLM_BASE_URL": chat_server.url},
                             timeout_s=5.0, max_retries=0, temperature=None, max_tokens=None)
    [p] = LLMProposer.from_config(cfg).propose(view(), 1, random.Random(1))
    assert p.error is None and p.exchange["model"] == "cfg-model"
    req = chat_server.requests[0]
    assert req["model"] == "cfg-model" and "temperature" not in req and "max_tokens" not in req


def test_importing_the_proposer_does_not_import_openai():
    code = "import sys, optiml.edits.llm; assert 'openai' not in sys.modules, 'openai imported'"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("body, said", [
    ({"object": "error", "message": "context too long", "code": 400}, "HTTP 400: context too long"),   # vLLM's form
    ({"error": {"error": {"message": "no such model"}}}, "HTTP 400: no such model"),                   # a proxy's nesting
    ({"object": "error", "code": 400}, "HTTP 400: Error code: 400"),
    ({"error": "model 'x' not found"}, "HTTP 400: model 'x' not found"),                               # Ollama's form
    ({"error": {"error": "rate limited"}}, "HTTP 400: rate limited"),
], ids=["a_message_at_the_top", "a_nested_error", "no_message", "an_error_string", "a_nested_error_string"])
def test_a_servers_error_is_said_by_its_own_message_wherever_its_body_keeps_it(chat_server, body, said):
    """An HTTP error's sentence in the server's own words: the body's message, its nested error's
    message, or the error's text (Ollama answers {"error": "..."}); else the client's own text,
    which names the code. No form of body is a crash."""
    chat_server.script(Fail(400, body=body), PAD)
    ps = proposer(chat_server, max_retries=0).propose(view(), 1, random.Random(1))
    assert [p.error for p in ps] == [f"llm request failed: {said}"]
