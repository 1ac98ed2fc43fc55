"""``optiml generate``'s stage: from a description and a spec with no kernel, the messages that ask a
chat model for several implementation strategies and then one complete kernel per strategy (and one
repair of a kernel that failed), and the reading of its answers.

The wiring that asks, stores and evaluates (``optiml.app.generate``) is above it; this package only
builds messages (:mod:`.prompt`), sends one request and records it as an exchange (:mod:`.chat`,
the LLM proposer's client and settings), and reads what came back (:mod:`.answers`): a strategy
list, a kernel with its launch line, or one sentence saying why a kernel is refused before it is
ever built.
"""
from .answers import Kernel, Strategy, check_kernel, parse_kernel, parse_strategies
from .chat import Chat
from .prompt import kernel_messages, repair_messages, signature, strategy_messages

__all__ = ["Chat", "Kernel", "Strategy", "check_kernel", "kernel_messages", "parse_kernel", "parse_strategies",
           "repair_messages", "signature", "strategy_messages"]
