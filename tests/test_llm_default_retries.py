"""The llm proposer's client (optiml/edits/llm.py) by default retries a failed request twice, as
LLMConfig says: a server that fails three times in a row gives an error proposal after exactly
three requests (the scripted local Chat Completions server of tests/chat_server.py)."""
import random

from optiml.edits.llm import LLMConfig, LLMProposer
from tests.chat_server import Fail, chat_server  # noqa: F401
from tests.test_edits_llm import PAD, view


def test_the_default_client_retries_twice_like_the_config():
    llm = LLMProposer("scripted-coder", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert llm.max_retries == LLMConfig(model="m").max_retries == 2
    assert llm.client.max_retries == 2 and llm.client.timeout == 120.0


def test_three_failures_in_a_row_are_an_error_proposal_after_three_requests(chat_server):
    chat_server.script(Fail(503, "busy"), Fail(503, "busy"), Fail(503, "busy"), PAD)
    llm = LLMProposer("scripted-coder", base_url=chat_server.url, timeout_s=5.0)
    [p] = llm.propose(view(), 2, random.Random(1))
    assert p.error == "llm request failed: HTTP 503: busy"
    assert len(chat_server.requests) == 3
