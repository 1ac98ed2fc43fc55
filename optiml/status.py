"""Every outcome a candidate can have: one :class:`Status` enum with its :class:`Category`.

A status is a ``str`` (``Status.OK == "ok"``), so records written as plain strings (JSON, the
trace database, the GPU child's pickles) read back as the same values; :func:`category` places
any of them, known or not, in one of a few categories that the reward, the GPU worker, the
search, the store and the exports reason about.
"""
from __future__ import annotations

from enum import Enum


class Category(str, Enum):
    UNFINISHED = "unfinished"          # a node waiting for its evaluation, or in it
    NOT_EVALUATED = "not_evaluated"    # a proposal that never became a candidate (no build, no GPU)
    OK = "ok"                          # built, verified, timed
    BUILD_FAILURE = "build_failure"    # refused before the GPU: the source, the launch, nvcc
    WRONG = "wrong"                    # ran and computed a wrong answer, or an unsafe one
    CRASH = "crash"                    # faulted, failed to launch or hung on the GPU
    INFRASTRUCTURE = "infrastructure"  # optiml's side failed (the reference, the GPU child)

    def __str__(self) -> str:
        return self.value


class Status(str, Enum):
    """A candidate's status, in the order a candidate moves through the evaluation."""
    PENDING = "pending"
    RUNNING = "running"
    EDIT_FAILED = "edit_failed"
    DUPLICATE = "duplicate"
    REFUSED = "refused"                # a rewrite the rules proposer looked at and did not make, saying why
    OK = "ok"
    SOURCE_ERROR = "source_error"
    LAUNCH_CONFIG_ERROR = "launch_config_error"
    COMPILE_ERROR = "compile_error"
    BUILD_TIMEOUT = "build_timeout"
    BUILD_LOST = "build_lost"
    LAUNCH_ERROR = "launch_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    WRONG_OUTPUT = "wrong_output"
    UNSAFE = "unsafe"                  # right answers, but compute-sanitizer found a memory error, a race, ...
    BEYOND_BOUND = "beyond_bound"      # verified twice, yet timed well past the GPU's speed of light: the
                                       # kernel skips work its checks cannot see, or the spec's [counts] overstate it
    REFERENCE_ERROR = "reference_error"
    HARNESS_ERROR = "harness_error"
    WORKER_LOST = "worker_lost"        # the cluster lost the machines evaluating it: nothing is known of it

    def __str__(self) -> str:
        return self.value

    @property
    def category(self) -> Category:
        return _CATEGORY[self]


_CATEGORY = {
    Status.PENDING: Category.UNFINISHED, Status.RUNNING: Category.UNFINISHED,
    Status.EDIT_FAILED: Category.NOT_EVALUATED, Status.DUPLICATE: Category.NOT_EVALUATED,
    Status.REFUSED: Category.NOT_EVALUATED,
    Status.OK: Category.OK,
    Status.SOURCE_ERROR: Category.BUILD_FAILURE, Status.LAUNCH_CONFIG_ERROR: Category.BUILD_FAILURE,
    Status.COMPILE_ERROR: Category.BUILD_FAILURE, Status.BUILD_TIMEOUT: Category.BUILD_FAILURE,
    Status.BUILD_LOST: Category.BUILD_FAILURE,
    Status.WRONG_OUTPUT: Category.WRONG, Status.UNSAFE: Category.WRONG, Status.BEYOND_BOUND: Category.WRONG,
    Status.LAUNCH_ERROR: Category.CRASH, Status.RUNTIME_ERROR: Category.CRASH, Status.TIMEOUT: Category.CRASH,
    Status.REFERENCE_ERROR: Category.INFRASTRUCTURE, Status.HARNESS_ERROR: Category.INFRASTRUCTURE,
    Status.WORKER_LOST: Category.INFRASTRUCTURE,
}


def category(status: str | None) -> Category:
    """The category of ``status``; a status optiml does not know counts as an infrastructure failure."""
    try:
        return Status(status).category
    except ValueError:
        return Category.INFRASTRUCTURE


def of(category_: Category) -> frozenset[Status]:
    """The statuses of one category."""
    return frozenset(s for s, c in _CATEGORY.items() if c is category_)


EVALUATION_STATUSES = tuple(s for s in Status if s.category not in (Category.UNFINISHED, Category.NOT_EVALUATED))
"""What a candidate's evaluation can end with (what the evaluation pipeline returns)."""

GPU_FAULTS = frozenset({Status.RUNTIME_ERROR, Status.LAUNCH_ERROR, Status.TIMEOUT, Status.HARNESS_ERROR,
                        Status.REFERENCE_ERROR})
"""Statuses after which a GPU context cannot be trusted again (the persistent worker restarts)."""

UNSCORED = frozenset({Status.WORKER_LOST})
"""Statuses that say nothing of the candidate (its machine was lost): the search neither rewards
nor punishes them (no reward is backed up)."""
