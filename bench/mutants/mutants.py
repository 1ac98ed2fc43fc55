"""A small mutation check: does the CPU suite fail when the code is wrong?

Each mutant is one realistic change (a flipped comparison, a dropped guard, an off-by-one, a
wrong key): a file, a snippet that occurs exactly once in it, its replacement, the area and the
tests that should notice. The repository's files (tracked and untracked, not ignored, as they are
on disk) are copied to a temporary folder; each mutant is applied there in turn, its tests run with
PYTHONPATH set to the copy (``pytest -x -q``, a per-mutant timeout, which counts as killed), and
the file is restored. A mutant whose snippet is not found exactly once is reported as an error
(the code moved on: update the mutant). Before mutating, the tests are run once on the unmutated
copy; they must pass. No GPU is needed: the tests named are CPU tests.

    python3 bench/mutants/mutants.py                 # all mutants, a table of killed/total per area
    python3 bench/mutants/mutants.py --area reward   # one area
    python3 bench/mutants/mutants.py --list          # the mutants, not run
    python3 bench/mutants/mutants.py --planted       # only the planted bugs
    python3 bench/mutants/mutants.py -j 2            # two copies, two mutants at a time
    python3 bench/mutants/mutants.py --module optiml/edits/hygiene.py   # mutants made from modules' code
    python3 bench/mutants/mutants.py --changed HEAD~3                   # ... from the modules changed since

``--module`` and ``--changed`` add mutants generated from each module's own code
(bench/mutants/generated.py), reported per module, to the hand-written ones of the files named.

    python3 bench/mutants/mutants.py --coverage map.cov --generated-only --changed HEAD~1 -j 2 --json out.json

``--coverage FILE`` decides each mutant by the tests that run its lines (a map made once per commit
with pytest-cov's test contexts, built on the unmutated copy when FILE does not exist: about the
suite's time, and each test's seconds kept beside it): a killed mutant takes seconds instead of its
files' whole run. The tests of the files named after the module or its package join the tests that
ran the lines, and they run a file at a time, the files whose tests take least first, each file's
quickest first (for a module every test runs, such as the spec loader, those are most of the suite;
a template's own files hold minutes of nvcc). A map made without the seconds runs the files named
after the module first, whole. Lines no test runs
in-process (a def's defaults, a constant) take the tests of their function, else of their module;
a mutant no test reaches at all gets the import-based selection; ``--thorough`` gives that selection
to every survivor too (code that runs only in a subprocess). ``--json`` writes each outcome as it
comes (file, old, new), so a long run can be read while it runs. A survivor listed in
bench/mutants/equivalent.py (read and found to change nothing a user sees) is reported with its reason
and left out of its module's score, killed / (total - equivalent).

The 21 planted bugs are marked ``planted=True``; tests/test_planted_bugs.py holds a test for each;
tests/test_mutants_survivors.py and tests/test_compare_edges.py the tests written for mutants that survived the suite.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from queue import Queue

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
sys.path.insert(0, str(Path(__file__).resolve().parent))         # bench/mutants/: generated.py
from common import ROOT as REPO  # noqa: E402
import equivalent  # noqa: E402
from generated import generate, named_after  # noqa: E402

PLANTED = ("tests/test_planted_bugs.py", "tests/test_mutants_survivors.py",
           "tests/test_compare_edges.py")   # run with every mutant


@dataclass(frozen=True)
class Mutant:
    area: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    planted: bool = False          # one of the 21 planted bugs
    generated: bool = False        # made from the module's code (bench/mutants/generated.py), its tests by import

    @property
    def name(self) -> str:
        first = next((s.strip() for s in self.old.split("\n") if s.strip()), "")
        return f"{self.file}: {first[:60]}"


# the tests of each area (PLANTED is added to every mutant's)
REWARD = ("tests/test_search_reward.py",)
SEARCH = ("tests/test_search_mcts.py", "tests/test_search_tree.py", "tests/test_search_parallel.py")
BEST = ("tests/test_best.py", "tests/test_search_mcts.py")
VERIFY = ("tests/test_compare.py",)
RELATIVE = ("tests/test_compare_relative.py",)
JUDGE = ("tests/test_runner_prepare.py",)
DRAFT = ("tests/test_draft_tolerance.py",)
KB_DRAFT = ("tests/test_kernelbench_draft.py", "tests/test_kernelbench.py")
TRACED = ("tests/test_templates_traced.py", "tests/test_kernelbench_l2.py")
TRIAL = ("tests/test_draft_trial.py",)
ROWS_TRACED = ("tests/test_traced_rows.py",)
EPILOGUE = ("tests/test_edits_templates.py",
            "tests/test_templates_on_host.py::test_the_fp32_gemm_template_computes_an_epilogue_written_through_locals")
TIMING = ("tests/test_timing_stats.py", "tests/test_final_choice.py")
STORE = ("tests/test_traces_store.py", "tests/test_search_resume_store.py", "tests/test_records_contract.py")
SPEC = ("tests/test_spec.py", "tests/test_timing_stats.py")
EDITS = ("tests/test_edits_blocks.py", "tests/test_edits_llm.py")
PAD = ("tests/test_edits_rules.py::test_no_padding_without_conflicts_and_padding_first_with_them",)


def M(area, file, old, new, tests, planted=False) -> Mutant:
    return Mutant(area, file, old, new, tuple(tests), planted)


MUTANTS: list[Mutant] = [
    # -- reward -----------------------------------------------------------------------------------
    M("reward", "optiml/search/reward.py", "if not median or median <= 0 or not root_ms or root_ms <= 0:",
      "if not median or median <= 0:", REWARD, planted=True),
    M("reward", "optiml/search/reward.py", "not isinstance(value, (int, float)) or math.isnan(value):",
      "not isinstance(value, (int, float)):", REWARD, planted=True),
    M("reward", "optiml/search/reward.py", "return min(max(float(value) / scale, 0.0), 1.0)",
      "return max(float(value) / scale, 0.0)", REWARD, planted=True),
    M("reward", "optiml/search/reward.py", "total -= METRIC_WEIGHT * conflicts", "total += METRIC_WEIGHT * conflicts", REWARD),
    M("reward", "optiml/search/reward.py", "total += METRIC_WEIGHT * max(sol)", "total += METRIC_WEIGHT * min(sol)", REWARD),
    M("reward", "optiml/search/reward.py", "cheap = kind in (Category.BUILD_FAILURE, Category.NOT_EVALUATED)",
      "cheap = kind in (Category.BUILD_FAILURE,)", REWARD),
    M("reward", "optiml/search/reward.py", "r = math.log(root_ms / median)", "r = math.log(median / root_ms)", REWARD),
    M("reward", "optiml/search/reward.py", "if parent_ms and median > parent_ms *", "if parent_ms and median < parent_ms *", REWARD),
    M("reward", "optiml/search/reward.py", "r -= REGRESSION_PENALTY", "r += REGRESSION_PENALTY", REWARD),
    M("reward", "optiml/search/reward.py", "return BUILD_FAILURE_REWARD if cheap else RUNTIME_FAILURE_REWARD",
      "return RUNTIME_FAILURE_REWARD if cheap else BUILD_FAILURE_REWARD", REWARD),
    M("reward", "optiml/search/reward.py", "(1.0 + 2.0 * max(parent_spread or 0.0, 0.0))",
      "(1.0 + 2.0 * (parent_spread or 0.0))", REWARD),
    # -- search (mcts, tree) ----------------------------------------------------------------------
    M("search", "optiml/search/mcts.py", "return self._cut is not None and node.median_ms is not None and node.median_ms > self._cut",
      "return False", ("tests/test_search_focus.py",)),
    M("search", "optiml/search/mcts.py", "                self._cut, node = None, self.root     # nothing within the focus is left: the slow nodes' turn\n                continue",
      "                return False", ("tests/test_search_focus.py",)),
    M("search", "optiml/search/mcts.py", "            if not self._held(n):\n                return self._pending.pop(i)",
      "            if True:\n                return self._pending.pop(i)", ("tests/test_search_focus.py",)),
    M("search", "optiml/search/mcts.py", " and not new_implementation(node.edit, node.proposer)\n", "\n", ("tests/test_search_focus.py",)),
    M("search", "optiml/edits/types.py", 'return proposer == "seed" or edit.startswith("template ")', 'return proposer == "seed"',
      ("tests/test_search_focus.py",)),
    M("search", "optiml/search/mcts.py", "        far = [n for n in inflight.values() if self._held(n)]", "        far = []",
      ("tests/test_search_focus.py",)),
    M("search", "optiml/search/mcts.py", "            self._count_inflight(node, -1)\n            node.status = PENDING",
      "            node.status = PENDING", ("tests/test_search_focus.py",)),
    M("search", "optiml/search/mcts.py", "elif (same := self._keys.get(node_key(p.source, p.flags))) is not None:",
      "elif (same := self._keys.get(node_key(p.source, ()))) is not None:", SEARCH, planted=True),
    M("search", "optiml/search/mcts.py", "node.exhausted = node.fruitless >= self.config.max_fruitless",
      "node.exhausted = node.fruitless > self.config.max_fruitless", SEARCH, planted=True),
    M("search", "optiml/search/mcts.py", "sqrt_n = math.sqrt(max(node.visits + node.inflight, 1))",
      "sqrt_n = math.sqrt(max(node.visits, 1))", SEARCH, planted=True),
    M("search", "optiml/search/mcts.py", "sqrt_n / (1 + c.visits + c.inflight)", "sqrt_n / (1 + c.visits)", SEARCH),
    M("search", "optiml/search/mcts.py", "return max(choice, key=puct)", "return min(choice, key=puct)", SEARCH),
    M("search", "optiml/search/mcts.py", "        else:\n            node.fruitless = 0\n",
      "        else:\n            pass\n", SEARCH),
    M("search", "optiml/search/mcts.py", "and n.median_ms and not n.unsafe]", "and n.median_ms]", SEARCH),
    M("search", "optiml/search/mcts.py", "self.evaluations + len(inflight) < budget", "self.evaluations < budget", SEARCH),
    M("search", "optiml/search/mcts.py", "node.exhausted = node.fruitless >= config.max_fruitless",
      "node.exhausted = False", SEARCH),
    M("search", "optiml/search/mcts.py", "k = max(1, node.widening_limit(self.config.k_w, self.config.alpha) - len(node.children))",
      "k = max(1, node.widening_limit(self.config.k_w, self.config.alpha))", SEARCH),
    M("search", "optiml/search/tree.py", "max(self.visits + self.inflight, 1) ** alpha", "max(self.visits, 1) ** alpha", SEARCH),
    M("search", "optiml/search/tree.py", "return self.value_sum / self.visits if self.visits else 0.0",
      "return self.value_sum if self.visits else 0.0", SEARCH),
    M("search", "optiml/search/tree.py", 'if s.startswith("//"):\n            return ""',
      'if s.startswith("//"):\n            return s', SEARCH),
    M("search", "optiml/search/tree.py", "return normalize_source(source), tuple(flags)",
      "return source, tuple(flags)", SEARCH),
    # -- best -------------------------------------------------------------------------------------
    M("best", "optiml/best.py", "band = fastest.median_ms * (1 + max(2 * spread, MIN_BAND))",
      "band = fastest.median_ms * (1 + 2 * spread)", BEST),
    M("best", "optiml/best.py", "key=lambda c: (c.edits, c.median_ms, c.order))",
      "key=lambda c: (c.median_ms, c.edits, c.order))", BEST),
    M("best", "optiml/best.py", "return [c for c in ok if c.median_ms <= band]",
      "return [c for c in ok if c.median_ms <= fastest.median_ms]", BEST),
    M("best", "optiml/best.py", "key=lambda c: (c.median_ms, c.order))", "key=lambda c: (c.order, c.median_ms))", BEST),
    M("best", "optiml/best.py", "spread = fastest.spread if isinstance(fastest.spread, (int, float)) else DEFAULT_SPREAD",
      "spread = fastest.spread if isinstance(fastest.spread, (int, float)) else 0.0", BEST),
    # -- verification ------------------------------------------------------------------------------
    M("verify", "optiml/verify/worker.py", 'modified = [a.name for a in spec.args if a.role == "input" and',
      'modified = [a.name for a in spec.args if a.role == "inout" and', VERIFY, planted=True),
    M("verify", "optiml/verify/compare.py", "if modified_inputs:\n                failed = check",
      "if False:\n                failed = check", VERIFY),
    M("verify", "optiml/verify/compare.py", 'CHECK_ORDER = ("unwritten", "nan", "inf", "input_modified", "tolerance", "relative")',
      'CHECK_ORDER = ("tolerance", "unwritten", "nan", "inf", "input_modified", "relative")', VERIFY),
    M("verify", "optiml/verify/compare.py", "res.inf = int((o_inf & ~(r_inf & (np.sign(o) == np.sign(r)))).sum())",
      "res.inf = int((o_inf & ~r_inf).sum())", VERIFY),
    M("verify", "optiml/verify/compare.py", "bound = atol + rtol * np.abs(r)", "bound = atol + rtol * np.abs(o)", VERIFY),
    M("verify", "optiml/verify/compare.py", "if not np.isfinite(ar).all() or not (diff <= atol + rtol * ar).all():",
      "if not (diff <= atol + rtol * ar).all():", VERIFY),
    M("verify", "optiml/verify/compare.py", "res.nan = int((o_nan & ~r_nan & ~unwritten).sum())",
      "res.nan = int((o_nan & ~unwritten).sum())", VERIFY),
    M("verify", "optiml/verify/compare.py", " & ~_bytes_equal(ref, np.broadcast_to(poison, ref.shape))", "", VERIFY),
    M("verify", "optiml/verify/compare.py", "ok |= unwritten  # counted above, not twice", "pass", VERIFY),
    M("verify", "optiml/verify/compare.py", "if out.shape != ref.shape:", "if out.size < ref.size:", VERIFY),
    # -- the relative check, its device mirror, the speed of light, drafted tolerances ---------------
    M("relative", "optiml/verify/compare.py",
      "return self.rel_l2_err > self.rel_rms_bound or self.gross_ref >= SIGNIFICANT * self.ref_rms",
      "return self.rel_l2_err > self.rel_rms_bound", RELATIVE),
    M("relative", "optiml/verify/compare.py", "return self.rel_l2_err > self.rel_rms_bound or",
      "return self.rel_l2_err > 10 * self.rel_rms_bound or", RELATIVE),
    M("relative", "optiml/verify/compare.py", "if self.rel_rms_bound is None or not self.ref_rms > 0:",
      "if self.rel_rms_bound is None:", RELATIVE),
    M("relative", "optiml/verify/compare.py", "gross = d64 > GROSS_REL * ar", "gross = d64 > ar", RELATIVE),
    M("relative", "optiml/verify/compare.py", '("tolerance", self.mismatched), ("relative", int(self.relative_failed))',
      '("tolerance", self.mismatched)', RELATIVE),
    M("relative", "optiml/verify/compare.py", "return self.ref_rms > 0 and self.atol > self.ref_rms",
      "return self.ref_rms > 0 and self.atol < self.ref_rms", RELATIVE),
    M("relative", "optiml/verify/compare.py", "res.ref_rms = float(np.sqrt(ss_ref / r.size))",
      "res.ref_rms = float(np.sqrt(ss_ref))", RELATIVE),
    M("relative", "optiml/verify/compare.py",
      'rel_rms_bound=None if rel_rms is None or _dt.get(dtype).kind != "float" else float(rel_rms))',
      'rel_rms_bound=None if rel_rms is None else float(rel_rms))', RELATIVE),
    M("relative", "optiml/verify/gpu_ops.py", "            res.gross_ref = stats.gross_ref\n", "", RELATIVE),
    M("relative", "optiml/verify/gpu_ops.py", "gross = fin & (diff > GROSS_REL * ar)", "gross = fin & (diff > ar)", RELATIVE),
    M("relative", "optiml/verify/gpu_ops.py", "res.ref_rms = math.sqrt(stats.sum_sq_ref / stats.finite_pairs)",
      "res.ref_rms = math.sqrt(stats.sum_sq_ref)", RELATIVE),
    M("relative", "optiml/spec/load.py", "if not 0 < rel_rms < 1:", "if not 0 < rel_rms <= 1:", RELATIVE),
    M("relative", "optiml/spec/load.py", "        rel_rms = _dt.DEFAULT_REL_RMS.get(dname)\n",
      "        rel_rms = None\n", RELATIVE),
    M("relative", "optiml/spec/model.py", "return Tolerance(atol, rtol, _dt.DEFAULT_REL_RMS.get(dtype))",
      "return Tolerance(atol, rtol)", RELATIVE),
    M("relative", "optiml/runner/judge.py", "hr.timing.median_ms * SOL_MARGIN < bound",
      "hr.timing.median_ms < bound * SOL_MARGIN", JUDGE),
    M("relative", "optiml/runner/judge.py", "tols[a.dtype] = Tolerance(min(t.atol, d_atol), min(t.rtol, d_rtol), rel)",
      "tols[a.dtype] = Tolerance(t.atol, min(t.rtol, d_rtol), rel)", JUDGE),
    M("relative", "optiml/runner/judge.py", "    again_job = replace(again_job, spec=strict_tolerances(again_job.spec))\n",
      "", JUDGE),
    M("relative", "optiml/runner/judge.py", "rel = t.rel_rms if d_rel is None or t.rel_rms is None else min(t.rel_rms, d_rel)",
      "rel = t.rel_rms", JUDGE),
    M("relative", "optiml/draft/tolerance.py", "if rms is not None and rms > 0 and 10 * rtol * rms < atol:",
      "if rms is not None and rms > 0 and 10 * rtol * rms > atol:", DRAFT),
    M("relative", "optiml/draft/tolerance.py", "grown = 4 * _U_ACC[dtype] * math.sqrt(reduction)",
      "grown = 4 * _U_ACC[dtype] * reduction", DRAFT),
    M("relative", "optiml/draft/tolerance.py", "alpha = max(-2.0, min(2.0, math.log(r1 / r0) / math.log(p1 / p0)))",
      "alpha = math.log(r1 / r0) / math.log(p1 / p0)", DRAFT),
    M("relative", "optiml/draft/tolerance.py", "    p0, r0 = max(lower)", "    p0, r0 = min(lower)", DRAFT),
    # -- KernelBench drafting: the task at reduced sizes, parameters and sizes matched to the kernel
    M("draft", "optiml/draft/kbtask.py", "            node.value = ast.copy_location(ast.Constant(int(sizes[name])), node.value)\n",
      "            pass\n", KB_DRAFT),
    M("draft", "optiml/draft/kbtask.py", "    sys.modules[name] = mod\n", "", KB_DRAFT),
    M("draft", "optiml/draft/kbtask.py", "if v is not None and v > 0 and not target.startswith(\"_\"):",
      "if v is not None and not target.startswith(\"_\"):", KB_DRAFT),
    M("draft", "optiml/draft/kernelbench.py", "        if score(order) > best_score:", "        if score(order) < best_score:", KB_DRAFT),
    M("draft", "optiml/draft/kernelbench.py", "                total += 2 if len(kernel_shapes[name]) == ta.dim() else -3",
      "                total += 0", KB_DRAFT),
    M("draft", "optiml/draft/kernelbench.py", "                out[k] = (d, p.name)", "                pass", KB_DRAFT),
    M("draft", "optiml/draft/kernelbench.py", "            if sizes[d] > 1 and v % sizes[d] == 0:", "            if False:", KB_DRAFT),
    M("draft", "optiml/draft/kernelbench.py", "    sizes = {{size: int(tensors[arg]) for arg, size in SIZES.items() if arg in tensors}}",
      "    sizes = {{}}", KB_DRAFT),
    M("templates", "optiml/edits/templates/epilogue.py",
      'env[name] = f"({cond}) ? ({then_env[name]}) : ({else_env[name]})"',
      'env[name] = f"({cond}) ? ({else_env[name]}) : ({then_env[name]})"', EPILOGUE),
    M("templates", "optiml/edits/templates/epilogue.py", "and op == \"=\" and not in_branch:", "and op == \"=\":", EPILOGUE),
    M("templates", "optiml/edits/templates/epilogue.py", "if len(found) == 1 and len(stores) == 1 else None",
      "if found else None", EPILOGUE),
    M("templates", "optiml/edits/templates/epilogue.py", "c.start_byte >= loop.end_byte", "c.start_byte >= loop.start_byte", EPILOGUE),
    M("templates", "optiml/edits/templates/epilogue.py", "    env: dict[str, str] = {acc: acc} if acc else {}",
      "    env: dict[str, str] = {}", EPILOGUE),
    M("templates", "optiml/edits/templates/__init__.py",
      'return f"optiml_local_{name}" if name in clash and not member else name',
      'return f"optiml_local_{name}" if name in clash else name', EPILOGUE),
    M("profiler", "optiml/verify/calibrate.py", '    arch = "sm_90a" if arch == "sm_90" else arch ',
      "    arch = arch ", ("tests/test_calibration.py",)),
    # -- behaviours a user sees: the best among equals, routing, reuse, widening, drafted grids and sizes, refusals
    M("best", "optiml/best.py", "key=lambda c: (c.edits, c.median_ms, c.order)) if band",
      "key=lambda c: (c.edits, c.order, c.median_ms)) if band", ("tests/test_best.py",)),
    M("cluster", "optiml/cluster/gpu_workers.py", "live = [a for a in self.gpu_workers() if a not in excluded]",
      "live = [a for a in self.gpu_workers()]",
      ("tests/test_cluster_gpu.py::test_a_worker_of_another_gpu_model_is_offered_no_job_once_it_refused_one",)),
    M("runner", "optiml/runner/runner.py", "            if not item.withdrawn:\n                item.reached_gpu = True",
      "            if True:\n                item.reached_gpu = True", ("tests/test_runner.py",)),
    M("runner", "optiml/runner/runner.py", "if item is None or item.reached_gpu or item.later is not None:",
      "if item is None or item.later is not None:", ("tests/test_runner.py",)),
    M("runner", "optiml/runner/stages.py", "            if prev.future.cancelled():", "            if False:", ("tests/test_runner.py",)),
    M("spec", "optiml/source.py", '    if entry and "template" in text:', '    if False:', ("tests/test_edits_knobs.py",)),
    M("edits", "optiml/edits/structural.py", "    if per_block:\n", "    if per_block and False:\n", ("tests/test_edits_knobs.py",)),
    M("runner", "optiml/runner/stages.py", "if category(done.status) not in (Category.OK, Category.WRONG):",
      "if category(done.status) not in (Category.OK, Category.WRONG, Category.INFRASTRUCTURE):",
      ("tests/test_runner.py::test_a_transient_failure_of_the_machinery_is_not_reused_for_the_same_code",)),
    M("search", "optiml/search/mcts.py", "return len(node.children) < limit or", "return len(node.children) <= limit or",
      ("tests/test_search_mcts.py",)),
    M("search", "optiml/search/mcts.py",
      "memo[node.id] = node.status not in _UNFINISHED and (node.status != Status.OK or (",
      "memo[node.id] = (node.status != Status.OK or (", ("tests/test_search_mcts.py", "tests/test_search_parallel.py")),
    M("draft", "optiml/draft/signature.py", "if axis not in axes or self.facts.bounds.get(var) in self.sizes:",
      "if axis not in axes:", ("tests/test_draft_roles.py",)),
    M("draft", "optiml/draft/kernelbench.py", "        v = v + 2 * k\n", "        v = v + k\n", KB_DRAFT),
    M("templates", "optiml/edits/templates/rowwise.py",
      "    if len(dims) > 1:\n        return None, \"not row-wise: loops run over more than one of X's dimensions\"\n", "",
      ("tests/test_edits_rowwise.py",)),
    M("search", "optiml/search/mcts.py", 'self.stopped = ("exhausted" if exhausted else', 'self.stopped = ("budget" if exhausted else',
      ("tests/test_optimize_fakes.py::test_a_search_that_runs_out_of_proposals_says_so_and_what_would_go_further",)),
    M("search", "optiml/app/optimize.py", 'if getattr(search, "stopped", None) != "exhausted" or search.evaluations >= budget:',
      'if search.evaluations >= budget:',
      ("tests/test_optimize_fakes.py::test_a_search_that_runs_out_of_proposals_says_so_and_what_would_go_further",)),
    # -- the GEMM and its chain read from a torch reference -------------------------------------------
    M("templates", "optiml/edits/templates/traced.py", 'return f"(1.0f / (1.0f + expf(-({x}))))"',
      'return f"(1.0f / (1.0f + expf(({x}))))"', TRACED),
    M("templates", "optiml/edits/templates/traced.py", "0.044715f", "0.04715f", TRACED),
    M("templates", "optiml/edits/templates/traced.py", 'return f"(({x}) > 0.0f ? ({x}) : ({x}) * {_lit(slope)})"',
      'return f"(({x}) < 0.0f ? ({x}) : ({x}) * {_lit(slope)})"', TRACED),
    M("templates", "optiml/edits/templates/traced.py", 'b_layout = "kn" if bw[2] == (n, 1) else ("nk" if bw[2] == (1, k) else None)',
      'b_layout = "nk" if bw[2] == (n, 1) else ("kn" if bw[2] == (1, k) else None)', TRACED),
    M("templates", "optiml/edits/templates/traced.py", 'return f"({p} / {q})"', 'return f"({q} / {p})"', TRACED),
    M("templates", "optiml/edits/templates/traced.py", '{self.mnk[1]: "OPTIML_N", self.mnk[0]: "OPTIML_M"',
      '{self.mnk[1]: "OPTIML_M", self.mnk[0]: "OPTIML_N"', TRACED),
    M("templates", "optiml/edits/templates/traced.py", 'acc = self.local(f"acc + {self.operand(bias)}", f"(acc + {self.formula(bias)})")',
      'acc = self.local("acc", "acc")', TRACED),
    M("templates", "optiml/edits/templates/traced.py", '"which no template fuses with a GEMM yet", beyond=True)',
      '"which no template fuses with a GEMM yet")', TRACED),
    M("templates", "optiml/edits/templates/traced_rows.py", 'init = {"+": "0.0f", _MAX: "-INFINITY", _MIN: "INFINITY"}[op]',
      'init = {"+": "0.0f", _MAX: "0.0f", _MIN: "INFINITY"}[op]', ROWS_TRACED),
    M("templates", "optiml/edits/templates/traced_rows.py", 'var = f"{s.c} / (@J@ - {_lit(float(corr))})"',
      'var = f"{s.c} / @J@"', ROWS_TRACED),
    M("templates", "optiml/edits/templates/traced_rows.py", 'c = f"({x.c} - {m.c} - logf({s.c}))"',
      'c = f"({x.c} - logf({s.c}))"', ROWS_TRACED),
    M("templates", "optiml/edits/templates/traced_rows.py", 'elif (a, b) == (d0, d1):', 'elif a == d0:', ROWS_TRACED),
    M("templates", "optiml/edits/templates/traced_rows.py", 'idx = f"(optiml_i / ({ptail(b)})) % ({kernel(_prod(dims[a:b]))})" if b < nd else',
      'idx = f"(optiml_i % ({ptail(b)})) % ({kernel(_prod(dims[a:b]))})" if b < nd else', ROWS_TRACED),
    M("templates", "optiml/edits/templates/traced_rows.py", 'if self.red is not None and self.red != red:',
      'if False:', ROWS_TRACED),
    M("templates", "optiml/edits/templates/traced_rows.py", 'red = (dims[0], dims[-1] + 1)', 'red = (dims[0], dims[0] + 1)',
      ROWS_TRACED),
    M("templates", "optiml/edits/templates/traced_rows.py", 'o_size, j_size, i_size = _prod(dims[:d0]), _prod(dims[d0:d1]), _prod(dims[d1:])',
      'o_size, j_size, i_size = _prod(dims[:d0]), _prod(dims[d0:d1]), _prod(dims[d1 + 1:])', ROWS_TRACED),
    M("templates", "optiml/edits/templates/traced_rows.py", 'rstd = self.row_local(f"rsqrtf({var.c} / @J@ + {_lit(eps)})", var.level)',
      'rstd = self.row_local(f"rsqrtf({var.c} / @J@)", var.level)', ROWS_TRACED),
    M("templates", "optiml/edits/templates/traced_rows.py",
      'kind = "elem" if any(v.kind == "elem" for v in vs) else ("row" if any(v.kind == "row" for v in vs) else "num")',
      'kind = "row" if any(v.kind == "row" for v in vs) else ("elem" if any(v.kind == "elem" for v in vs) else "num")',
      ROWS_TRACED),
    M("templates", "optiml/edits/templates/row_reduce.cu.j2", "+ (optiml_live ? optiml_row : 0){% if not op.reduced %} * optiml_n{% endif %};",
      "+ (optiml_live ? optiml_row : 0) * optiml_n;", ROWS_TRACED),
    M("templates", "optiml/edits/templates/col_reduce.cu.j2",
      "OPTIML_TY *optiml_yc = {{ op.y }} + (optiml_live ? (size_t)optiml_o * optiml_ni + optiml_i0 : 0);",
      "OPTIML_TY *optiml_yc = {{ op.y }} + (optiml_live ? (size_t)optiml_o * optiml_ni : 0);", ROWS_TRACED),
    M("templates", "optiml/edits/templates/__init__.py", "        if beside and not op.reduced:\n            return [], None\n",
      "        if beside:\n            return [], None\n", ROWS_TRACED),
    M("templates", "optiml/edits/templates/__init__.py", "    if beyond:\n        g, why = None, why_traced\n",
      "    if False:\n        g, why = None, why_traced\n", TRACED),
    M("templates", "optiml/edits/templates/__init__.py", "    clash = names & _declared(body)", "    clash = set()",
      ("tests/test_templates_on_host.py::test_the_gemm_templates_keep_working_where_the_arguments_are_named_like_their_locals",)),
    M("templates", "optiml/edits/templates/__init__.py", '        if size in ("acc", "m", "n"):', "        if size in ():", EPILOGUE),
    M("templates", "optiml/edits/templates/__init__.py", "for k, v in (*vals.items(), *t.defines)]", "for k, v in vals.items()]",
      EPILOGUE),
    M("templates", "optiml/edits/templates/__init__.py", "    if callee is not None and not loops:",
      "    if callee is not None and loops:", EPILOGUE),
    M("templates", "optiml/edits/templates/gemm_f32_warp.cu", "const int m0 = (optiml_first + optiml_in_band % optiml_rows) * BM",
      "const int m0 = (optiml_first + optiml_in_band / optiml_rows) * BM", ("tests/test_templates_on_host.py",)),
    # row_cluster: offered on Hopper where a block cannot hold a row; its part sized to the registers; a
    # cluster attribute the grammar lacks kept out of the parse
    M("templates", "optiml/edits/templates/__init__.py", "if (c.cluster and _sm(arch) >= 90) or",
      "if (c.cluster and _sm(arch) >= 100) or", ("tests/test_edits_rowwise.py",)),
    # row_grid: offered from sm_70 (its waits), never for a program that can return before its slot is
    # freed; its start fills a large GPU with few rows
    M("templates", "optiml/edits/templates/__init__.py", "and arch is not None and _sm(arch) >= 70:",
      "and arch is not None and _sm(arch) >= 60:", ("tests/test_edits_rowwise.py",)),
    M("templates", "optiml/edits/templates/__init__.py", '(c.grouped and not re.search(r"\\breturn\\b", repr(op.steps)))',
      "c.grouped", ("tests/test_edits_rowwise.py",)),
    M("templates", "optiml/edits/templates/rowwise.py", "max(op.o_timing, 1) * p[key] >= 128",
      "max(op.o_timing, 1) * p[key] >= 1", ("tests/test_edits_rowwise.py",)),
    M("templates", "optiml/edits/templates/rowwise.py", '"OPTIML_THREADS * OPTIML_VEC * OPTIML_ITEMS <= 49152",',
      '"OPTIML_THREADS * OPTIML_VEC * OPTIML_ITEMS <= 65536",', ("tests/test_edits_rowwise.py",)),
    # the streaming hint (CS): in the start only where the part is read once, and on the row's load
    M("templates", "optiml/edits/templates/rowwise.py", 'p["OPTIML_CS"] != 1))', 'p["OPTIML_CS"] != 0))',
      ("tests/test_edits_rowwise.py",)),
    M("templates", "optiml/edits/templates/row_reduce.cu.j2",
      "OPTIML_CACHED(optiml_it) = OPTIML_LOAD_X(optiml_xr + optiml_j0);",
      "OPTIML_CACHED(optiml_it) = *reinterpret_cast<const optiml_xv *>(optiml_xr + optiml_j0);",
      ("tests/test_edits_rowwise.py",)),
    M("templates", "optiml/source.py", r'_UNKNOWN_ATTRIBUTES = re.compile(r"\b(?:__cluster_dims__|__maxnreg__)',
      r'_UNKNOWN_ATTRIBUTES = re.compile(r"\b(?:__maxnreg__)', ("tests/test_source.py",)),
    # -- the CPU emulation and init's number inputs, argument order, integer ranges, extents
    M("draft", "optiml/draft/emulate.py", "    return _poisoned(out)\n", "    return out\n", TRIAL),
    M("draft", "optiml/draft/emulate.py", "if (++arrived == expected) { arrived = 0; gen++; return; }",
      "if (++arrived == expected) { arrived = 0; return; }", TRIAL),
    M("draft", "optiml/draft/kernelbench.py", "    _in_kernel_order(lines, args_at, [p.name for p in kern.params])\n", "", KB_DRAFT),
    M("draft", "optiml/draft/kernelbench.py", "not small.is_floating_point() and int(small.max()) + 1 < high:",
      "not small.is_floating_point() and int(small.max()) + 1 > high:", KB_DRAFT),
    M("draft", "optiml/draft/kernelbench.py", "        choices[p.name] = [(v, f\"the task's input {i} (a number get_inputs() passes to forward)\")]\n",
      "        choices[p.name] = [(1, f\"the task's input {i} (a number get_inputs() passes to forward)\")]\n", KB_DRAFT),
    M("draft", "optiml/draft/kernelbench.py", "powers[key][name] = half if abs(a - half) < 0.1 else a",
      "powers[key][name] = a", KB_DRAFT),
    M("draft", "optiml/draft/kernelbench.py", "if s_a and s_b and abs(math.log(s_a / s_b)) > math.log(_SAME_SPREAD):",
      "if s_a and s_b and abs(math.log(s_a / s_b)) < math.log(_SAME_SPREAD):", KB_DRAFT),
    M("draft", "optiml/draft/kernelbench.py", "if not pw or abs(math.log(predicted / s_b)) > math.log(_SAME_SPREAD):",
      "if not pw:", KB_DRAFT),
    M("draft", "optiml/draft/kernelbench.py", 'w(f"init = {_init_of(ta, tb, scaling.get((role, where)))}")',
      'w(f"init = {_init_of(ta, tb)}")', KB_DRAFT),
    M("profiler", "optiml/profiler/diagnosis.py", "self.tf32_tensor_gflops / 3 > self.fp32_gflops:",
      "self.tf32_tensor_gflops / 3 < self.fp32_gflops:", ("tests/test_calibration.py",)),
    M("draft", "optiml/draft/trial.py", '        add(" * ".join(out_dims[i - 1:]))\n', "", TRIAL),
    M("draft", "optiml/draft/kernelbench.py", '                ref_args["SIZES"][p.name] = value     # a size no array',
      '                pass  # a size no array', ("tests/test_kernelbench_draft.py",)),
    M("draft", "optiml/draft/trial.py", "        return \"\" if ran or larger_ran else TOO_LARGE",
      "        return \"\" if ran else TOO_LARGE", TRIAL),
    # -- timing ------------------------------------------------------------------------------------
    M("timing", "optiml/verify/timing_stats.py", "iqr_ms=float(q75 - q25)", "iqr_ms=float(q90 - q10)", TIMING, planted=True),
    M("timing", "optiml/verify/gpu_timing.py", "if median_ci_rel(samples) <= tcfg.precision:",
      "if median_ci_rel(samples[-chunk:]) <= tcfg.precision:", TIMING, planted=True),
    M("timing", "optiml/verify/timing_stats.py", "return [(round_index + j) % n_kernels for j in range(n_kernels)]",
      "return list(range(n_kernels))", TIMING, planted=True),
    M("timing", "optiml/app/optimize.py", "speedup=seed_t.median_ms / chosen_t.median_ms,",
      "speedup=chosen_t.median_ms / seed_t.median_ms,", TIMING, planted=True),
    M("timing", "optiml/verify/gpu_timing.py", "chunk = max(tcfg.min_reps, 10)", "chunk = 5", TIMING),
    # (dropping ``r >= tcfg.min_reps`` from the early stop is equivalent: the chunk is at least
    #  min_reps and reps never below it, so no check can come before min_reps; not a mutant)
    M("timing", "optiml/verify/gpu_timing.py", "return samples, blocks, [plan.rounds * w for w in plan.warmup]",
      "return samples, blocks, list(plan.warmup)", TIMING),
    M("timing", "optiml/verify/timing_stats.py", "lo = max(0, math.floor(n / 2 - h))", "lo = max(0, math.ceil(n / 2 - h))", TIMING),
    M("timing", "optiml/verify/timing_stats.py", "return (hi - lo) / 2 / med", "return (hi - lo) / med", TIMING),
    M("timing", "optiml/verify/timing_stats.py", "math.ceil(aim / e)", "math.ceil(aim * e)", TIMING),
    M("timing", "optiml/verify/timing_stats.py", "max(1, math.ceil(WARM_MS / e))", "max(0, math.floor(WARM_MS / e))", TIMING),
    M("timing", "optiml/verify/timing_stats.py", "if rounds <= MIN_ROUNDS or plan.own_ms(est) <= PLAN_MS:",
      "if plan.own_ms(est) <= PLAN_MS or rounds <= 1:", TIMING),
    M("timing", "optiml/verify/timing_stats.py", "ratios = [n / d for n, d in pairs]", "ratios = [d / n for n, d in pairs]", TIMING),
    M("timing", "optiml/app/optimize.py", "interval = ratio_interval(seed_t.blocks_ms, chosen_t.blocks_ms)",
      "interval = ratio_interval(chosen_t.blocks_ms, seed_t.blocks_ms)", TIMING),
    M("timing", "optiml/verify/timing_stats.py", "p10_ms=float(q10), p90_ms=float(q90)",
      "p10_ms=float(q25), p90_ms=float(q75)", TIMING),
    # the [baseline] timed in the final job: its calls in the rounds, a job it breaks run again without it
    M("timing", "optiml/verify/gpu_timing.py", "        runs.append(call)\n", "", ("tests/test_baseline_run.py",)),
    M("timing", "optiml/app/optimize.py", "        if not ev.ok and vendor is not None:\n",
      "        if False and not ev.ok and vendor is not None:\n", ("tests/test_final_choice.py",)),
    M("timing", "optiml/verify/gpu.py", "if need and need + fn.get_attribute(",
      "if need > 48 * 1024 and need + fn.get_attribute(", ("tests/test_gpu_launch_attributes.py",)),
    # -- store -------------------------------------------------------------------------------------
    M("store", "optiml/traces/store.py", "\" WHERE id = ? AND status = 'pending'\", (os.getpid()",
      "\" WHERE id = ?\", (os.getpid()", STORE, planted=True),
    M("store", "optiml/traces/store.py", "\" WHERE id = ? AND status IN ('pending', 'running')\", (status, _now(), node_id))",
      "\" WHERE id = ?\", (status, _now(), node_id))", STORE, planted=True),
    M("store", "optiml/app/records.py", 'self.store.finish_node(nid, evaluation, "done" if node.status == Status.OK else "failed")',
      'self.store.finish_node(nid, evaluation, "done")', STORE, planted=True),
    M("store", "optiml/traces/store.py", 'return (timing.get("iqr_ms") or 0.0) / timing["median_ms"] if',
      'return (timing.get("iqr_ms") or 0.0) if', STORE, planted=True),
    M("store", "optiml/traces/store.py", 'depth = parent["depth"] + 1', 'depth = parent["depth"]', STORE),
    M("store", "optiml/traces/store.py", "\" updated_at = ? WHERE id = ? AND status = 'running'\"", "\" updated_at = ? WHERE id = ?\"", STORE),
    M("store", "optiml/traces/store.py", 'if r["worker_host"] != here or not _pid_alive(r["worker_pid"])]',
      'if r["worker_host"] != here]', STORE),
    M("store", "optiml/traces/store.py", 'if status not in ("done", "failed"):', 'if status not in ("done", "failed", "ok"):', STORE),
    M("store", "optiml/traces/store.py", 'if unknown or "status" not in evaluation:', "if unknown:", STORE),
    M("store", "optiml/traces/store.py", "SET status = 'pending', worker_pid = NULL", "SET status = 'failed', worker_pid = NULL", STORE),
    M("store", "optiml/traces/store.py", 'if ((result.get("sanitize") or {}).get("status")) == "unsafe":',
      'if ((result.get("sanitize") or {}).get("status")) == "unsafe!":', STORE),
    M("store", "optiml/traces/store.py", 'if (result or {}).get("spread") is not None:', "if False:", STORE),
    # -- spec --------------------------------------------------------------------------------------
    M("spec", "optiml/spec/model.py", "return {**constants, **sizes}", "return {**sizes, **constants}", SPEC, planted=True),
    M("spec", "optiml/spec/load.py", "if atol < 0 or rtol < 0:", "if atol < 0:", SPEC, planted=True),
    M("spec", "optiml/spec/load.py", "if len(verify_sizes) < 2:", "if len(verify_sizes) < 1:", SPEC),
    M("spec", "optiml/spec/load.py", "if set(vs) != set(timing_sizes):", "if not set(vs) <= set(timing_sizes):", SPEC),
    M("spec", "optiml/spec/load.py", "if not 0 <= timing.precision < 1:", "if not 0 <= timing.precision <= 1:", SPEC),
    M("spec", "optiml/spec/load.py", "if not 1 <= timing.min_reps <= timing.max_reps:", "if not 1 <= timing.min_reps:", SPEC),
    M("spec", "optiml/spec/load.py", "        if v <= 0:\n", "        if v < 0:\n", SPEC),
    M("spec", "optiml/spec/load.py", "if dname not in _dt.DTYPES:", "if dname in ():", SPEC),
    M("spec", "optiml/spec/model.py", 'if kind != "bool" and not lo <= v <= hi:', 'if kind != "bool" and not lo <= v:', SPEC),
    # -- edits -------------------------------------------------------------------------------------
    M("edits", "optiml/edits/atomics.py", "    if byte is not None and byte.group(1) in bytes_:\n        return \"256\"",
      "    if byte is not None and byte.group(1) in bytes_:\n        return \"128\"", ("tests/test_edits_atomics.py",)),
    M("edits", "optiml/source.py", "        if len(vals) == 1 and name not in values:", "        if name not in values:",
      ("tests/test_edits_knobs.py",)),
    M("edits", "optiml/edits/transforms.py", "not (_TUNABLE.search(name.upper()) or name in launched)", "not _TUNABLE.search(name)",
      ("tests/test_edits_knobs.py",)),
    M("edits", "optiml/edits/transforms.py", "not 1 <= math.prod(int(t) for t in threads) <= min(MAX_THREADS, cap or MAX_THREADS):",
      "False:", ("tests/test_edits_knobs.py",)),
    M("edits", "optiml/edits/atomics.py", "if (optiml_priv[optiml_j] != 0) atomicAdd", "if (optiml_priv[optiml_j] > 1) atomicAdd",
      ("tests/test_edits_atomics.py",)),
    M("edits", "optiml/edits/atomics.py", "cap = int(bins) if re.fullmatch(r\"\\d+\", bins) and int(bins) <= CAP else CAP", "cap = 64",
      ("tests/test_edits_atomics.py",)),
    M("edits", "optiml/edits/atomics.py", "        if value is not None and (value + 1) & value == 0:\n            return str(value + 1)",
      "        if value is not None and (value + 1) & value == 0:\n            return str(value)", ("tests/test_edits_atomics.py",)),
    M("edits", "optiml/edits/atomics.py", "    if uses != len(calls):", "    if False:", ("tests/test_edits_atomics.py",)),
    # the 16-byte loads: each item's byte taken from the wrong place in its chunk; the scalar tail starting one late
    M("edits", "optiml/edits/atomics.py", "(optiml_w_{a}[optiml_k >> 2] \"\n                           f\">> (8 * (optiml_k & 3)))",
      "(optiml_w_{a}[optiml_k & 3] \"\n                           f\">> (8 * (optiml_k >> 2)))", ("tests/test_edits_atomics.py",)),
    M("edits", "optiml/edits/atomics.py", "optiml_scalar_from = optiml_vectors * 16;", "optiml_scalar_from = optiml_vectors * 16 + 1;",
      ("tests/test_edits_atomics.py",)),
    M("edits", "optiml/edits/partials.py", 'if (optiml_k < {chunk} && {var} < ({limit}))', "if (optiml_k < {chunk})",
      ("tests/test_edits_partials.py",)),
    M("edits", "optiml/edits/partials.py", "const long long optiml_base = optiml_chunk * {chunk};",
      "const long long optiml_base = optiml_chunk * ({chunk} / 2);", ("tests/test_edits_partials.py",)),
    M("edits", "optiml/edits/partials.py", "& 15) == 0) {{", "& 3) == 0) {{", ("tests/test_edits_partials.py",)),
    M("edits", "optiml/edits/blocks.py", '            replace.append(line[1:] if line.startswith(" ") else line)\n',
      "            pass\n", EDITS, planted=True),
    M("edits", "optiml/edits/transforms.py", "if not isinstance(v, int) or v < 2 or v & (v - 1):",
      "if not isinstance(v, int) or v < 2:", PAD, planted=True),
    M("edits", "optiml/edits/llm.py", 'parsed = parse_answer(_THINK.sub("", answer))', "parsed = parse_answer(answer)",
      EDITS, planted=True),
    M("edits", "optiml/edits/llm.py", 're.compile(r"<think>.*?</think>"', 're.compile(r"<think>.*</think>"', EDITS),
    M("edits", "optiml/edits/blocks.py", "if len(where) > 1:", "if len(where) > 2:", EDITS),
    M("edits", "optiml/edits/blocks.py", "where = _matches(bare, needle, loose=False) or _matches(bare, needle, loose=True)",
      "where = _matches(bare, needle, loose=False)", EDITS),
    M("edits", "optiml/edits/blocks.py", "    if out == source:\n", "    if out is None:\n", EDITS),
    M("edits", "optiml/edits/blocks.py", "for i in range(len(hay) - n + 1)", "for i in range(len(hay) - n)", EDITS),
    M("edits", "optiml/edits/blocks.py", "if new and not last_eol:", "if new:", EDITS),
    M("edits", "optiml/edits/blocks.py", '        elif line.startswith("-"):\n            search.append(line[1:])',
      '        elif line.startswith("-"):\n            search.append(line)', EDITS),
    M("edits", "optiml/edits/llm.py", 'if finish == "length":', 'if finish == "stop":', EDITS),
    M("edits", "optiml/edits/transforms.py", '[(last.end_byte, last.end_byte, " + 1")]', '[(last.end_byte, last.end_byte, " + 2")]', PAD),
    M("edits", "optiml/edits/blocks.py", "if not any(s.strip() for s in search):", "if not search:", EDITS),
]

AREAS = ("reward", "search", "best", "verify", "relative", "draft", "templates", "runner", "cluster", "timing", "store",
         "spec", "edits", "profiler")


def copy_repo(src: Path, dst: Path) -> None:
    """The repository's tracked and untracked (not ignored) files, as on disk, into ``dst``."""
    out = subprocess.run(["git", "-C", str(src), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         check=True, capture_output=True).stdout.decode()
    for rel in filter(None, out.split("\0")):
        s = src / rel
        if not s.is_file():
            continue
        d = dst / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(s, d)


MARK = "OPTIML_MUTANT_RUN"        # set in a run's pytest environment; every process it starts inherits it


def _marked(mark: str) -> list[int]:
    """The pids whose environment holds ``MARK=mark`` (Linux's /proc; none elsewhere)."""
    want, pids = f"{MARK}={mark}".encode(), []
    for d in (os.listdir("/proc") if os.path.isdir("/proc") else ()):
        if d.isdigit():
            try:
                if want in Path(f"/proc/{d}/environ").read_bytes().split(b"\0"):
                    pids.append(int(d))
            except OSError:
                continue
    return pids


def run_all_stopped(cmd, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run`` of ``cmd`` with a limit, and at the limit or at its end every process it
    started stopped too: its process group and whatever left that group (nvcc, which a builder starts
    in a process group of its own, under a builder the timeout interrupted; a fake tool a failing test
    left waiting), found by a mark in their environment. Left running, such a compile held a core for
    17 minutes and pushed the mutants after it past their own limits; two fake compute-sanitizers a
    mutant's failing test left polling took a core's tenth for an hour.
    Raises TimeoutExpired, as ``subprocess.run`` does."""
    mark = f"{os.getpid()}.{threading.get_ident()}.{time.monotonic_ns()}"
    proc = subprocess.Popen(cmd, cwd=cwd, env=dict(env, **{MARK: mark}), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, start_new_session=True)

    def stop_all():
        for _ in range(3):                  # a child may start another while its parent is stopped
            try:
                os.killpg(proc.pid, 9)
            except OSError:
                pass
            for pid in _marked(mark):
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_all()
        try:
            proc.communicate(timeout=30)    # a process that escaped the mark may still hold the pipes
        except subprocess.TimeoutExpired:
            pass
        raise
    stop_all()                              # what the tests left behind (pytest itself has ended)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def pytest(copy: Path, tests, timeout: float) -> tuple[str, float, str]:
    """(outcome, seconds, output tail): 'passed', 'failed' (a test failed, or pytest stopped on an
    error the code raised while collecting or in a hook), 'timeout' (every process it started
    stopped: :func:`run_all_stopped`) or 'error' (nothing collected)."""
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    t0 = time.monotonic()
    try:
        p = run_all_stopped(cmd, copy, env, timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - t0, ""
    tail = (p.stdout + p.stderr)[-1500:]
    outcome = {0: "passed", 1: "failed", 2: "failed", 3: "failed"}.get(p.returncode, "error")
    return outcome, time.monotonic() - t0, tail


class CoverageMap:
    """Which tests run each line of the package: a coverage data file with a context a test
    (``pytest --cov=optiml --cov-context=test``, see :func:`make_coverage_map`). A mutant runs the
    tests that execute its lines first: where the mutant changes what they compute, one of them fails
    within seconds; the whole import-based selection only runs for a mutant they do not kill (or
    that no test runs in-process: code reached only in a subprocess, or run at import).
    Made at one commit, it is right for that commit's line numbers."""

    def __init__(self, path: Path, repo: Path):
        import coverage
        self.data = coverage.CoverageData(basename=str(path))
        self.data.read()
        timed = durations_path(path)
        self.seconds: dict[str, float] = json.loads(timed.read_text()) if timed.exists() else {}
        self.by_rel = {}
        for f in self.data.measured_files():
            fp = Path(f)
            if "optiml" in fp.parts:
                self.by_rel[str(Path(*fp.parts[fp.parts.index("optiml"):]))] = f
        self._cache: dict[str, dict] = {}

    def tests_for(self, file: str, first: int, last: int) -> tuple[str, ...]:
        """The test ids that ran any of lines ``first``..``last`` of ``file`` (relative path)."""
        measured = self.by_rel.get(file)
        if measured is None:
            return ()
        if file not in self._cache:
            self._cache[file] = self.data.contexts_by_lineno(measured)
        found = dict.fromkeys(c.rsplit("|", 1)[0] for n in range(first, last + 1)
                              for c in self._cache[file].get(n, ()) if c)
        return tuple(found)

    def tests_near(self, file: str, text: str, first: int, last: int) -> tuple[str, ...]:
        """The tests that ran the lines; where none did in a test (a ``def`` line's defaults, a
        constant: run at import, outside any test), those that ran the innermost function around
        them, else any line of the module."""
        found = self.tests_for(file, first, last)
        if found:
            return found
        import ast
        around = [n for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.lineno <= first and last <= (n.end_lineno or n.lineno)]
        if around:
            fn = max(around, key=lambda n: n.lineno)
            found = self.tests_for(file, fn.lineno, fn.end_lineno or fn.lineno)
        return found or self.tests_for(file, 1, text.count("\n") + 1)

    def ordered(self, tests: tuple[str, ...], own_files: tuple[str, ...]) -> tuple[str, ...]:
        """``tests`` (those that run the mutated lines), then the other tests of ``own_files`` (files
        named after the mutated module), each group by the map's timings: a file's tests together
        (its module fixtures are made once), the files whose tests here take least first, each
        file's quickest first. The tests that run the lines come first because they are the ones
        that fail: a template's own files hold minutes of nvcc that would otherwise run before the
        one quick test that decides. Without timings, the own files first, as whole files."""
        if not self.seconds:
            return own_files + tuple(t for t in tests if t.split("::", 1)[0] not in own_files)

        def seconds(t: str) -> float:
            return self.seconds.get(t, float("inf"))

        def by_time(group) -> list[str]:
            by_file: dict[str, list[str]] = {}
            for t in group:
                by_file.setdefault(t.split("::", 1)[0], []).append(t)
            files = sorted(by_file.values(), key=lambda ts: sum(map(seconds, ts)))
            return [t for ts in files for t in sorted(ts, key=seconds)]
        first = list(dict.fromkeys(tests))
        rest = [t for t in self.seconds if t.split("::", 1)[0] in own_files and t not in set(first)]
        return tuple(by_time(first) + by_time(rest))


def durations_path(coverage_file: Path) -> Path:
    """Where a coverage map's test timings are kept: beside it."""
    return coverage_file.with_name(coverage_file.name + ".seconds.json")


_DURATION = re.compile(r"^([\d.]+)s (?:setup|call|teardown) +(\S.*?)\s*$")


def seconds_of_tests(report: str) -> dict[str, float]:
    """{test id: seconds of its setup, call and teardown} from pytest's ``--durations=0`` report."""
    out: dict[str, float] = {}
    for line in report.splitlines():
        m = _DURATION.match(line)
        if m:
            out[m.group(2)] = out.get(m.group(2), 0.0) + float(m.group(1))
    return out


def make_coverage_map(copy: Path, out: Path, timeout: float) -> tuple[str, float, str]:
    """Run the whole CPU suite on ``copy`` under coverage with a context a test, into ``out``, and
    each test's seconds beside it (:func:`durations_path`), so that a mutant runs its quickest first."""
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1", COVERAGE_FILE=str(out))
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "auto", "-p", "no:cacheprovider", "--cov=optiml",
           "--cov-context=test", "--cov-report=", "--durations=0", "--durations-min=0"]
    t0 = time.monotonic()
    try:
        p = run_all_stopped(cmd, copy, env, timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - t0, ""
    durations_path(out).write_text(json.dumps(seconds_of_tests(p.stdout), indent=0))
    return ("passed" if p.returncode in (0, 1) and out.exists() else "error"), time.monotonic() - t0, (p.stdout + p.stderr)[-1500:]


def run_mutant(copy: Path, m: Mutant, timeout: float, cov: CoverageMap | None = None,
               thorough: bool = False) -> tuple[str, float]:
    """'killed', 'timeout' (counted as killed), 'survived' or 'error: ...' (snippet not found once,
    tests could not run). With ``cov``, the tests that run the mutated lines decide; the import-based
    selection runs where no test runs them in-process (and, ``thorough``, where they leave it alive:
    a test that reaches the line only in a subprocess can still kill it, so without ``thorough`` a
    survivor is a survivor of the tests that run its lines, which can only undercount the kills)."""
    path = copy / m.file
    text = path.read_text()
    count = text.count(m.old)
    if count != 1:
        return f"error: snippet found {count} times", 0.0
    covering: tuple[str, ...] = ()
    if cov is not None and m.generated:      # a hand-written mutant names the tests written for it
        first = text[:text.index(m.old)].count("\n") + 1
        covering = cov.tests_near(m.file, text, first, first + m.old.count("\n"))
        if covering:
            # the test files named after the module or its package join them (a test that only reads
            # a constant runs no line of the module), and the quickest run first: for a module every
            # test runs (the spec loader) the covering tests are most of the suite, and for a template
            # its own files hold minutes of nvcc, while a quick test decides in seconds
            covering = cov.ordered(covering, tuple(t for t in m.tests if named_after(t, m.file)))
    try:
        path.write_text(text.replace(m.old, m.new))
        secs0 = 0.0
        if covering:
            outcome, secs0, tail = pytest(copy, covering, timeout)
            if outcome in ("failed", "timeout"):
                return ("killed" if outcome == "failed" else "timeout"), secs0
            if outcome == "passed" and not thorough:
                return "survived", secs0
        outcome, secs, tail = pytest(copy, (*m.tests, *PLANTED), timeout)
        secs += secs0
    finally:
        path.write_text(text)
    if outcome == "failed":
        return "killed", secs
    if outcome == "timeout":            # counted as killed, named apart in the report
        return "timeout", secs
    if outcome == "passed":
        return "survived", secs
    return f"error: pytest ({tail.strip().splitlines()[-1] if tail.strip() else 'no output'})", secs


def write_json(path: Path, mutants: list[Mutant], results: dict[int, tuple[str, float]],
               equiv: dict[int, str] | None = None) -> None:
    """Every mutant run so far (area, file, old, new, outcome, seconds; an equivalent one's reason)."""
    equiv = equiv or {}
    path.write_text(json.dumps([
        {"area": mutants[k].area, "file": mutants[k].file, "old": mutants[k].old, "new": mutants[k].new,
         "outcome": "equivalent" if k in equiv else r[0], "seconds": round(r[1], 1),
         **({"why": equiv[k]} if k in equiv else {})} for k, r in sorted(results.items())], indent=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Apply each mutant to a copy of the repository and run its CPU tests; "
                                             "print killed/total per area and the survivors (no GPU needed).")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--area", choices=AREAS, action="append", help="only this area (may be repeated)")
    ap.add_argument("--planted", action="store_true", help="only the 21 planted bugs")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per mutant's tests (a timeout is a kill)")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="mutants run at once, each in a copy of its own")
    ap.add_argument("--skip-baseline", action="store_true", help="do not run the unmutated tests first")
    ap.add_argument("--repo", type=Path, default=REPO, help="the repository to copy (default: this script's)")
    ap.add_argument("--module", type=Path, action="append", default=[],
                    help="also mutants generated from this module's code (may be repeated)")
    ap.add_argument("--changed", metavar="REV", help="also mutants generated from every package module changed since REV")
    ap.add_argument("--per-module", type=int, default=8, help="generated mutants a module (default 8)")
    ap.add_argument("--seed", type=int, default=0,
                    help="generated mutants drawn with this seed: 0 (the default) is the standing set, another "
                         "seed draws fresh mutants the standing set does not hold")
    ap.add_argument("--coverage", type=Path, metavar="FILE",
                    help="a coverage data file with a context a test (made here, on the unmutated copy, when FILE "
                         "does not exist): each mutant runs the tests that execute its lines first")
    ap.add_argument("--json", type=Path, metavar="FILE",
                    help="also write every mutant (file, old, new, area, outcome, seconds) to FILE, as it ends")
    ap.add_argument("--thorough", action="store_true",
                    help="with --coverage: a mutant the covering tests leave alive also gets the import-based selection")
    ap.add_argument("--generated-only", action="store_true",
                    help="with --module/--changed: leave out the hand-written mutants of those files")
    args = ap.parse_args(argv)

    mutants = [m for m in MUTANTS if (not args.area or m.area in args.area) and (m.planted or not args.planted)]
    modules = [p.resolve() for p in args.module]
    if args.changed:
        from generated import changed_modules
        modules += changed_modules(args.repo.resolve(), args.changed)
    if modules:
        repo = args.repo.resolve()
        named = {str(m.relative_to(repo)) for m in modules}
        if args.generated_only:
            mutants = []
        elif not args.area:        # only the hand-written mutants of these files, beside the generated ones
            mutants = [m for m in mutants if m.file in named]
        for mod in dict.fromkeys(modules):
            if not mod.is_file() or mod.suffix != ".py":
                print(f"mutants.py: {mod} is not a Python module.", file=sys.stderr)
                return 2
            area = ".".join(mod.relative_to(repo).with_suffix("").parts[1:])
            mutants += [Mutant(area, f, old, new, tests, generated=True)
                        for f, old, new, tests in generate(mod, repo, args.per_module, args.seed)]
    if args.list:
        for i, m in enumerate(mutants, 1):
            print(f"{i:3d} {m.area:7s} {'*' if m.planted else ' '} {m.name}  ->  {m.new.strip()[:50]!r}")
        print(f"{len(mutants)} mutants (* = the planted bugs)")
        return 0
    if not mutants:
        print("no mutants selected")
        return 1

    with tempfile.TemporaryDirectory(prefix="optiml-mutants-") as tmp:
        copies = [Path(tmp) / f"copy{i}" for i in range(max(1, args.jobs))]
        for c in copies:
            copy_repo(args.repo, c)
        tests = sorted({t for m in mutants for t in m.tests} | set(PLANTED))
        cov = None
        if args.coverage is not None:
            if not args.coverage.exists():
                outcome, secs, tail = make_coverage_map(copies[0], args.coverage.resolve(), 3600.0)
                if outcome != "passed":
                    print(f"the coverage map could not be made ({outcome}):\n{tail}", file=sys.stderr)
                    return 2
                print(f"coverage map: the suite ran in {secs:.0f} s into {args.coverage}", flush=True)
            cov = CoverageMap(args.coverage, args.repo.resolve())
        if not args.skip_baseline:
            outcome, secs, tail = pytest(copies[0], tests, max(args.timeout, 600.0))
            if outcome != "passed":
                print(f"the unmutated tests do not pass ({outcome}):\n{tail}", file=sys.stderr)
                return 2
            print(f"unmutated: {len(tests)} test files pass in {secs:.0f} s; {len(mutants)} mutants", flush=True)
        free: Queue = Queue()
        for c in copies:
            free.put(c)
        lock = threading.Lock()
        results: dict[int, tuple[str, float]] = {}

        def one(i: int) -> None:
            copy = free.get()
            try:
                res = run_mutant(copy, mutants[i], args.timeout, cov, args.thorough)
            finally:
                free.put(copy)
            with lock:
                results[i] = res
                if args.json is not None:
                    write_json(args.json, mutants, results)
                print(f"[{len(results):3d}/{len(mutants)}] {res[0]:8s} {res[1]:5.1f} s  {mutants[i].area:7s} "
                      f"{mutants[i].name}", flush=True)

        with ThreadPoolExecutor(max_workers=len(copies)) as pool:
            list(pool.map(one, range(len(mutants))))

    # a survivor listed in equivalent.py is reported with its reason and left out of the score
    equiv = {i: e[2] for i, r in results.items() if r[0] == "survived"
             and (e := equivalent.entry(mutants[i].file, mutants[i].old, mutants[i].new))}
    if args.json is not None:
        write_json(args.json, mutants, results, equiv)
    width = max(8, *(len(m.area) for m in mutants))
    print(f"\n{'area':{width}s} {'killed':>6s} {'equiv':>6s} {'total':>6s} {'score':>6s}")
    ok = True
    for area in dict.fromkeys([*AREAS, *(m.area for m in mutants)]):
        idx = [i for i, m in enumerate(mutants) if m.area == area]
        if not idx:
            continue
        killed = sum(results[i][0] in ("killed", "timeout") for i in idx)
        eq = sum(i in equiv for i in idx)
        score = killed / (len(idx) - eq) if len(idx) > eq else 1.0
        print(f"{area:{width}s} {killed:6d} {eq:6d} {len(idx):6d} {100 * score:5.0f}%")
        ok &= score >= 0.9
    total = sum(r[0] in ("killed", "timeout") for r in results.values())
    counted = len(mutants) - len(equiv)
    print(f"{'all':{width}s} {total:6d} {len(equiv):6d} {len(mutants):6d} {100 * total / max(counted, 1):5.0f}%"
          f"   (score: killed / (total - equivalent); {100 * total / len(mutants):.1f} % counting them as survivors)")
    if equiv:
        print("\nequivalent (bench/mutants/equivalent.py):")
        for i, w in sorted(equiv.items()):
            print(f"  {mutants[i].name}  ->  {mutants[i].new.strip()[:50]!r}: {w}")
    # an entry a killed mutant matches is no longer equivalent (or never was): the list is wrong there
    stale = list(dict.fromkeys(e for i, r in sorted(results.items()) if r[0] == "killed" and (
        e := equivalent.entry(mutants[i].file, mutants[i].old, mutants[i].new)) is not None))
    if stale:
        print("\nlisted as equivalent, yet a test fails on a mutant it matches (review the entry):")
        for f, text, _ in stale:
            print(f"  {f}: {text!r}")
    bad = [(mutants[i], r[0]) for i, r in sorted(results.items()) if r[0] != "killed" and i not in equiv]
    if bad:
        print("\nnot killed by a failing test (a timeout counts as killed):")
        for m, outcome in bad:
            print(f"  {outcome:8s} {m.area:7s} {m.name}  ->  {m.new.strip()[:60]!r}")
    return 0 if ok and not any(o.startswith("error") for _, o in bad) else 1


if __name__ == "__main__":
    sys.exit(main())
