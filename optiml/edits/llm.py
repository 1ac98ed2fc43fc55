"""The ``llm`` proposer: asks a chat model (any server speaking the OpenAI Chat Completions
protocol: OpenAI, vLLM, Ollama, llama.cpp...) for one source edit per request.

For a node it sends ``k`` requests (one edit each; ``n`` is never used, since servers such as
Ollama ignore it) carrying the task, the current source, its runtime, ptxas resources, profile
and diagnosis, and what was already tried from the node (:mod:`.prompt`). Each answer becomes one
:class:`Proposal`: the source with the answer's SEARCH/REPLACE blocks applied (:mod:`.blocks`),
or, when the answer cannot be read or applied, a Proposal with ``error`` set, which the search
stores as an ``edit_failed`` attempt and shows the model next time. A timeout or an API error
(after the SDK's own retries, the only retry layer) is such an error too, and ends the round.
Every Proposal carries its own ``exchange`` dict (one per request): ``model``, ``prompt`` (the
messages as JSON text), ``raw_answer``, ``tokens_in``, ``tokens_out`` (None when the server
reports no usage), ``latency_s``, ``error`` and ``parsed_edits`` (the blocks read from the answer).

The ``openai`` package is imported only when the first request is made.
"""
from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from loguru import logger

from ..errors import UserError
from .blocks import apply_edits, fallback_title, parse_answer
from .prompt import TRANSPORT_PREFIX, build_messages
from .types import NodeView, Proposal

NO_KEY = "not-needed"           # local servers (Ollama, vLLM) accept any key
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def resolve_api_key(base_url: str | None, env: Mapping[str, str] | None = None) -> str:
    """OPTIML_LLM_API_KEY, else OPENAI_API_KEY; a dummy for a local server (``base_url`` set)."""
    env = os.environ if env is None else env
    key = env.get("OPTIML_LLM_API_KEY") or env.get("OPENAI_API_KEY")
    if key:
        return key
    if base_url:
        return NO_KEY
    raise UserError("The llm proposer needs an API key: set OPTIML_LLM_API_KEY (or OPENAI_API_KEY), "
                    "or set OPTIML_LLM_BASE_URL to a local server that needs none.")


@dataclass(frozen=True)
class LLMConfig:
    """Which model to ask and how; the key comes from the environment and is never printed."""
    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 120.0
    max_retries: int = 2
    temperature: float | None = 0.7
    max_tokens: int | None = 4096

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> LLMConfig:
        """OPTIML_LLM_MODEL, OPTIML_LLM_BASE_URL (or OPENAI_BASE_URL), OPTIML_LLM_API_KEY (or
        OPENAI_API_KEY); ``overrides`` (e.g. from flags) win over the environment."""
        env = os.environ if env is None else env
        model = overrides.pop("model", None) or env.get("OPTIML_LLM_MODEL")
        if not model:
            raise UserError("The llm proposer needs a model: pass --llm-model or set OPTIML_LLM_MODEL (e.g. gpt-4o or qwen2.5-coder:32b).")
        base_url = overrides.pop("base_url", None) or env.get("OPTIML_LLM_BASE_URL") or env.get("OPENAI_BASE_URL")
        api_key = overrides.pop("api_key", None) or resolve_api_key(base_url, env)
        return cls(model=model, base_url=base_url or None, api_key=api_key, **overrides)


def _usage(response, name: str):
    usage = getattr(response, "usage", None)
    v = getattr(usage, name, None) if usage is not None else None
    return int(v) if isinstance(v, (int, float)) else None


def _error_text(body) -> str | None:
    """The server's own words in an HTTP error's body as the client hands it over: OpenAI's and vLLM's
    ``message``, a proxy's nested ``error`` (an object with a message, or a string), or the text
    itself (Ollama's ``{"error": "..."}`` reaches here as its string)."""
    if isinstance(body, str):
        return body.strip() or None
    if not isinstance(body, dict):
        return None
    if body.get("message"):
        return str(body["message"])
    inner = body.get("error")
    if isinstance(inner, dict):
        return str(inner.get("message") or "") or None
    return inner if isinstance(inner, str) and inner.strip() else None


def _failure(e: Exception, timeout_s: float) -> str:
    import openai

    if isinstance(e, openai.APITimeoutError):
        why = f"no answer within the {timeout_s:g} s timeout"
    elif isinstance(e, openai.APIStatusError):
        why = f"HTTP {e.status_code}: {' '.join(str(_error_text(e.body) or e.message).split())[:200]}"
    elif isinstance(e, openai.APIConnectionError):
        why = f"cannot reach the server ({' '.join(str(e).split())[:200]})"
    else:
        why = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
    return f"{TRANSPORT_PREFIX}: {why}"


class LLMProposer:
    """Proposes edits by asking a chat model; see the module docstring."""

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None,
                 timeout_s: float = 120.0, max_retries: int = 2, temperature: float | None = 0.7,
                 max_tokens: int | None = 4096, client=None, name: str = "llm"):
        self.name = name
        self.model, self.base_url = model, base_url
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.temperature, self.max_tokens = temperature, max_tokens
        self._api_key = api_key if api_key or client is not None else resolve_api_key(base_url)
        self._client = client

    @classmethod
    def from_config(cls, config: LLMConfig, client=None, name: str = "llm") -> LLMProposer:
        return cls(model=config.model, base_url=config.base_url, api_key=config.api_key,
                   timeout_s=config.timeout_s, max_retries=config.max_retries,
                   temperature=config.temperature, max_tokens=config.max_tokens, client=client, name=name)

    @property
    def client(self):
        if self._client is None:
            import openai

            self._client = openai.OpenAI(base_url=self.base_url, api_key=self._api_key,
                                         timeout=self.timeout_s, max_retries=self.max_retries)
        return self._client

    def propose(self, node: NodeView, k: int, rng) -> list[Proposal]:
        out: list[Proposal] = []
        for _ in range(max(k, 0)):
            p = self.ask(node, rng, proposed=[q.edit for q in out if not q.error])
            out.append(p)
            if p.error and p.error.startswith(TRANSPORT_PREFIX):
                break                     # the server is down or slow: do not wait k times
        return out

    def ask(self, node: NodeView, rng, proposed: list[str] | tuple[str, ...] = ()) -> Proposal:
        """One request, one Proposal (never raises for a transport error or a bad answer)."""
        exchange, finish = self.request(build_messages(node, proposed),
                                        seed=rng.randrange(2**31) if rng is not None else None)
        if exchange["error"] is not None:
            return self._failed(node, exchange, exchange["error"], "llm: (request failed)")
        return self._proposal(node, exchange, exchange["raw_answer"], finish)

    def request(self, messages: list[dict], seed: int | None = None) -> tuple[dict, str | None]:
        """Send ``messages`` once: (the exchange: model, prompt, raw answer, tokens, latency, and
        ``error`` when the transport failed, never raised; the answer's finish reason)."""
        exchange = {"model": self.model, "prompt": json.dumps(messages, indent=1), "raw_answer": None,
                    "tokens_in": None, "tokens_out": None, "latency_s": None, "error": None,
                    "parsed_edits": None}
        kwargs = {"model": self.model, "messages": messages}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        if seed is not None:
            kwargs["seed"] = seed                       # servers may ignore it
        import openai

        start = time.monotonic()
        try:
            response = self.client.chat.completions.create(**kwargs)
        except openai.APIError as e:
            exchange["latency_s"] = time.monotonic() - start
            exchange["error"] = _failure(e, self.timeout_s)
            return exchange, None
        exchange["latency_s"] = time.monotonic() - start
        exchange["tokens_in"] = _usage(response, "prompt_tokens")
        exchange["tokens_out"] = _usage(response, "completion_tokens")
        choice = response.choices[0] if response.choices else None
        exchange["raw_answer"] = (choice.message.content if choice is not None and choice.message else None) or ""
        return exchange, getattr(choice, "finish_reason", None)

    def _proposal(self, node: NodeView, exchange: dict, answer: str, finish: str | None) -> Proposal:
        if not answer.strip():
            return self._failed(node, exchange, "the model returned an empty answer", "llm: (empty answer)")
        parsed = parse_answer(_THINK.sub("", answer))
        exchange["parsed_edits"] = [{"kind": e.kind, "index": e.index, "search": e.search, "replace": e.replace}
                                    for e in parsed.edits]
        title = parsed.title or fallback_title(parsed.edits)
        error = parsed.error
        if error is None:
            applied = apply_edits(node.source, parsed.edits)
            error = applied.error
        if error is not None:
            if finish == "length":
                error += f" (the answer was cut off at max_tokens={self.max_tokens})"
            return self._failed(node, exchange, error, title, parsed.rationale)
        logger.debug("llm proposal: {} ({} tokens in, {} out, {:.1f} s)", title,
                     exchange["tokens_in"], exchange["tokens_out"], exchange["latency_s"])
        return Proposal(source=applied.source, flags=tuple(node.flags), edit=title,
                        rationale=parsed.rationale, prior=1.0, proposer=self.name, exchange=exchange)

    def _failed(self, node: NodeView, exchange: dict, error: str, title: str, rationale: str = "") -> Proposal:
        logger.info("llm proposal failed: {}", error)
        exchange["error"] = error
        return Proposal(source=node.source, flags=tuple(node.flags), edit=title, rationale=rationale,
                        prior=1.0, proposer=self.name, error=error, exchange=exchange)
