"""One request to the chat model, recorded as an exchange: the LLM proposer's client and settings
(:class:`optiml.edits.llm.LLMConfig`: the model, the server, the key from the environment, the
SDK's own retries as the only retry layer), without its edit format.

:meth:`Chat.ask` never raises for a transport failure: the exchange's ``error`` says it (starting
with :data:`optiml.edits.prompt.TRANSPORT_PREFIX`), as the proposer's does."""
from __future__ import annotations


from loguru import logger

from ..edits.llm import LLMConfig, LLMProposer


class Chat:
    """Asks one model, one request at a time; every request is an exchange dict with ``model``,
    ``prompt`` (the messages as JSON text), ``raw_answer``, ``tokens_in``, ``tokens_out``,
    ``latency_s``, ``error`` and ``parsed_edits`` (what was read from the answer, filled by the caller)."""

    def __init__(self, llm: LLMProposer):
        self.llm = llm

    @classmethod
    def from_config(cls, config: LLMConfig, client=None) -> Chat:
        return cls(LLMProposer.from_config(config, client=client, name="generate"))

    @property
    def model(self) -> str:
        return self.llm.model

    def ask(self, messages: list[dict], seed: int | None = None) -> dict:
        """Send ``messages``; the exchange, with the answer or the transport failure."""
        exchange, finish = self.llm.request(messages, seed=seed)
        if exchange["error"] is not None:
            logger.info("generate: {}", exchange["error"])
            return exchange
        if finish == "length":
            exchange["cut_off"] = f"the answer was cut off at max_tokens={self.llm.max_tokens}"
        return exchange
