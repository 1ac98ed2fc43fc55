"""One request to the chat model, recorded as an exchange: the LLM proposer's client and settings
(:class:`optiml.edits.llm.LLMConfig`: the model, the server, the key from the environment, the
SDK's own retries as the only retry layer), without its edit format.

:meth:`Chat.ask` never raises for a transport failure: the exchange's ``error`` says it (starting
with :data:`optiml.edits.prompt.TRANSPORT_PREFIX`), as the proposer's does."""
from __future__ import annotations

import json
import time

from loguru import logger

from ..edits.llm import LLMConfig, LLMProposer, _failure, _usage


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
        import openai

        llm = self.llm
        exchange = {"model": llm.model, "prompt": json.dumps(messages, indent=1), "raw_answer": None,
                    "tokens_in": None, "tokens_out": None, "latency_s": None, "error": None, "parsed_edits": None}
        kwargs = {"model": llm.model, "messages": messages}
        if llm.temperature is not None:
            kwargs["temperature"] = llm.temperature
        if llm.max_tokens is not None:
            kwargs["max_tokens"] = llm.max_tokens
        if seed is not None:
            kwargs["seed"] = seed                 # servers may ignore it
        start = time.monotonic()
        try:
            response = llm.client.chat.completions.create(**kwargs)
        except openai.APIError as e:
            exchange["latency_s"] = time.monotonic() - start
            exchange["error"] = _failure(e, llm.timeout_s)
            logger.info("generate: {}", exchange["error"])
            return exchange
        exchange["latency_s"] = time.monotonic() - start
        exchange["tokens_in"] = _usage(response, "prompt_tokens")
        exchange["tokens_out"] = _usage(response, "completion_tokens")
        choice = response.choices[0] if response.choices else None
        exchange["raw_answer"] = (choice.message.content if choice is not None and choice.message else None) or ""
        if getattr(choice, "finish_reason", None) == "length":
            exchange["cut_off"] = f"the answer was cut off at max_tokens={llm.max_tokens}"
        return exchange
