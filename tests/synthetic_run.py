"""A synthetic run of about 1000 candidates for the report's size and speed tests: the real search
(MCTS) writing through the real store (StoreObserver, TraceStore) with a FAKE proposer and a FAKE
evaluator, named as such. Nothing here is a GPU result: the times, metrics and failures are made up
from a hash of each source, so the same database comes out every time."""
from __future__ import annotations

import hashlib
import math
import re

from optiml.app.records import StoreObserver
from optiml.edits.types import Proposal
from optiml.search import MCTS, SearchConfig
from optiml.traces.store import TraceStore

from .conftest import EXAMPLES

SEED = (EXAMPLES / "sgemm_tiled_conflicts" / "sgemm_tiled_conflicts.cu").read_text()
ENTRY = "sgemm_tiled_conflicts"
MODEL = "fake-scripted-model"
METRICS = ("achieved_occupancy_pct", "dram_throughput_pct", "l2_throughput_pct", "l1_throughput_pct",
           "sm_throughput_pct", "smem_ld_bank_conflicts", "smem_st_bank_conflicts", "registers_per_thread",
           "stall_long_scoreboard", "stall_barrier", "stall_mio_throttle", "stall_short_scoreboard",
           "l2_hit_rate_pct", "dram_bytes", "duration_ns", "theoretical_occupancy_pct")


def _unit(text: str, salt: str) -> float:
    """A number in [0, 1) from a hash: the fakes' only source of variety."""
    return int(hashlib.sha256(f"{salt}:{text}".encode()).hexdigest()[:12], 16) / 16 ** 12


class FakeKnobProposer:
    """A FAKE proposer: each proposal adds one ``#define KNOB_n v`` line after ``#define TILE`` (a
    new source every time); every third call is dressed as an LLM exchange (a prompt with the
    source, an answer) so that the report shows prompts and answers."""

    name = "fake"

    def __init__(self):
        self.count = 0
        self.calls = 0

    def propose(self, node, k, rng):
        self.calls += 1
        llm = self.calls % 3 == 0
        exchange = None
        if llm:
            exchange = {"model": MODEL, "prompt": f"Make this kernel faster.\n\n{node.source}\n\nMetrics: "
                        + ", ".join(f"{m}={v:.3g}" for m, v in sorted(node.metrics.items())),
                        "raw_answer": "", "tokens_in": 1800 + rng.randrange(400), "tokens_out": 240,
                        "latency_s": 1.0 + rng.random()}
        out = []
        for _ in range(k):
            self.count += 1
            value = rng.choice((1, 2, 4, 8, 16, 32))
            line = f"#define KNOB_{self.count} {value}"
            source = node.source.replace("#define TILE 32\n", f"#define TILE 32\n{line}\n", 1)
            edit = f"KNOB_{self.count} = {value}"
            if exchange is not None:
                exchange["raw_answer"] += f"EDIT: {edit}\nSEARCH:\n#define TILE 32\nREPLACE:\n#define TILE 32\n{line}\n\n"
            out.append(Proposal(source=source, flags=(), edit=edit, proposer="fake-llm" if llm else "fake-rules",
                                rationale=f"knob {self.count} at {value} might change the tile's reuse",
                                prior=0.3 + rng.random(), exchange=exchange))
        return out


class FakeKnobEvaluator:
    """A FAKE evaluator: ok for about three candidates in four, with a time that falls with the
    number of knobs (times a hash's noise); the rest fail as compile errors, wrong outputs, runtime
    errors or timeouts with messages like the real ones; metrics and resources from the hash."""

    def evaluate(self, source, flags):
        knobs = len(re.findall(r"#define KNOB_", source))
        u = _unit(source, "status")
        if knobs and u < 0.10:
            return {"status": "compile_error", "message": f"kernel.cu(18): error: identifier \"KNOB_{knobs}\" is undefined"}
        if knobs and u < 0.17:
            return {"status": "wrong_output", "message": "C: 12 of 16384 elements differ (max abs err 0.031 at [5, 7])"}
        if knobs and u < 0.21:
            return {"status": "runtime_error", "message": "an illegal memory access was encountered"}
        if knobs and u < 0.24:
            return {"status": "timeout", "message": "the kernel did not finish in 10 s"}
        ms = 80.0 * math.exp(-0.22 * knobs + 0.5 * (_unit(source, "ms") - 0.5))
        metrics = {m: round(100 * _unit(source, m), 2) if m.endswith("_pct") else round(1e9 * _unit(source, m))
                   for m in METRICS}
        regs = 32 + 8 * int(4 * _unit(source, "regs"))
        return {"status": "ok", "median_ms": ms, "spread": 0.002 + 0.01 * _unit(source, "spread"),
                "metrics": metrics, "resources": {"registers": regs, "smem_static": 8192, "spill_stores": 0,
                                                  "spill_loads": 0},
                "diagnosis": [f"Memory-bound: L1/shared throughput at {metrics['l1_throughput_pct']:.0f}% of peak.",
                              "Shared-memory bank conflicts on loads; pad or swizzle the shared array."]}


def make_synthetic_run(path, candidates: int = 1000) -> int:
    """Write a run of ``candidates`` nodes (the seed included) to a new store at ``path``; returns its id."""
    with TraceStore(path) as store:
        run = store.start_run("synthetic_fake_run", kernel_source=SEED, seed=0, budget=candidates - 1,
                              device="none (fake evaluator)", config={"proposer": "fake", "budget": candidates - 1})
        evaluator = FakeKnobEvaluator()
        m = MCTS(SEED, evaluator, FakeKnobProposer(), config=SearchConfig(budget=candidates - 1),
                 observer=StoreObserver(store, run, evaluator), task="synthetic", entry=ENTRY)
        best = m.run()
        seed_ms, best_ms = m.root.median_ms, best.median_ms
        store.set_run_result(run, {"status": "ok", "speedup": seed_ms / best_ms, "seed_ms": seed_ms,
                                   "best_ms": best_ms, "speedup_low": 0.98 * seed_ms / best_ms,
                                   "speedup_high": 1.02 * seed_ms / best_ms, "speedup_rounds": 10,
                                   "best_edits": list(best.path()), "message": "",
                                   "speed_of_light": {"fraction": 0.42, "bound": "memory", "bound_ms": 0.42 * best_ms,
                                                      "peak": 3000.0, "peak_unit": "GB/s", "peak_name": "DRAM copy bandwidth",
                                                      "source": "fake", "device": "none"},
                                   "baseline": {"label": "fake_baseline", "median_ms": 2.0 * best_ms, "status": "ok"}})
        store.set_run_status(run, "done")
    return run
