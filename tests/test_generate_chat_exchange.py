"""What ``optiml generate``'s chat client (optiml/generate/chat.py) hands back for one request,
against the local scripted Chat Completions server: an answer cut off at max_tokens says so, a
complete one does not, and a failed request is still an exchange whose ``error`` names the failure."""
from optiml.edits.llm import LLMConfig
from optiml.generate import Chat
from tests.chat_server import Fail, Reply, chat_server  # noqa: F401  (the fixture)

MESSAGES = [{"role": "system", "content": "You write CUDA."}, {"role": "user", "content": "scale a vector"}]


def chat(server, **config) -> Chat:
    return Chat.from_config(LLMConfig(model="scripted", base_url=server.url, api_key="k", timeout_s=5.0,
                                      max_retries=0, **config))


def test_an_answer_cut_off_at_max_tokens_says_so_and_a_complete_one_does_not(chat_server):
    """finish_reason "length" marks the exchange ``cut_off`` with the max_tokens it hit (the repair
    message quotes it); a "stop" answer carries no such note."""
    chat_server.script(Reply("KERNEL: half\nWHY: cut\n```cuda\n__global__", finish_reason="length"),
                       Reply("KERNEL: whole\nWHY: done\n"))
    c = chat(chat_server, max_tokens=300)
    cut = c.ask(MESSAGES, seed=7)
    assert cut["error"] is None and cut["raw_answer"].startswith("KERNEL: half")
    assert cut["cut_off"] == "the answer was cut off at max_tokens=300"
    whole = c.ask(MESSAGES)
    assert whole["error"] is None and whole["raw_answer"] == "KERNEL: whole\nWHY: done\n"
    assert "cut_off" not in whole
    assert chat_server.requests[0]["max_tokens"] == 300 and chat_server.requests[0]["seed"] == 7


def test_a_failed_request_is_an_exchange_with_its_error_not_an_exception(chat_server):
    """An HTTP failure comes back as the exchange (model, prompt, latency) whose error names it,
    with no answer and no cut-off note."""
    chat_server.script(Fail(503, "busy"))
    x = chat(chat_server).ask(MESSAGES)
    assert isinstance(x, dict)
    assert x["error"] == "llm request failed: HTTP 503: busy"
    assert x["model"] == "scripted" and "scale a vector" in x["prompt"] and x["latency_s"] is not None
    assert x["raw_answer"] is None and "cut_off" not in x
    assert len(chat_server.requests) == 1
