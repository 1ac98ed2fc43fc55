"""``optiml init``: a draft task spec, from a kernel's signature and code (:mod:`.signature`) or
from a KernelBench-format task (:mod:`.kernelbench`).

Everything that cannot be inferred is marked ``# TODO`` in the draft, which still loads, so a user
edits a working file instead of starting from a blank page.
"""
from .kernelbench import draft_kernelbench
from .signature import draft_spec

__all__ = ["draft_spec", "draft_kernelbench"]
