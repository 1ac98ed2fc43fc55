"""Generated mutants read and found equivalent: the change alters nothing a user of optiml can see, so
no test can fail on it. Each entry is (module, a text the mutant's new code holds and its old code does
not, why), checked against the module's callers when it was added. mutants.py consults this list only
for a survivor: it is then reported as equivalent with its reason and left out of the module's score
(killed / (total - equivalent)); a listed mutant that a test kills counts as killed, and its entry is
reported, so that an entry no longer right (or too wide: the text matches other mutants) is seen.
Entries come from the standing set (seed 0) and from fresh draws (other seeds)."""
from __future__ import annotations

EQUIVALENT: tuple[tuple[str, str, str], ...] = (
    ("optiml/cluster/gpu_workers.py", "slot: int = 1", "a default every caller passes"),
    ("optiml/cluster/on_worker.py", "hexdigest()[:33]", "the length of a content-hash folder name"),
    ("optiml/app/optimize.py", 'float("nan"), 0, 1, 0', "_untimed's warm-up count, which nothing reads"),
    ("optiml/app/optimize.py", 'float("nan"), 0, 0, 1, False', "_untimed's input-set count, which nothing reads"),
    ("optiml/best.py", "c.median_ms >= 0", "a zero median is dropped by `c.median_ms and` already"),
    ("optiml/cli/__init__.py", "1 if quiet", "a verbose count that -q silences anyway"),
    ("optiml/cli/calibrate.py", "indent=2", "JSON indentation: layout only"),
    ("optiml/cli/kernel.py", "indent=3", "JSON indentation: layout only"),
    ("optiml/verify/calibrate.py", "indent=2", "JSON indentation: layout only"),
    ("optiml/cubin.py", "1 <= index", "symbol 0 is the null symbol, named #0 in every build"),
    ("optiml/dtypes.py", "9221365074855181009", "a NaN's payload, made and checked by one function"),
    ("optiml/draft/trial.py", "got.reshape(-2)", "numpy reads any negative size in reshape as the one unknown"),
    ("optiml/verify/compare.py", "b.reshape(-2)", "numpy reads any negative size in reshape as the one unknown"),
    ("optiml/verify/sanitize_child.py", "            return None",
     "the exit of a child whose parent is gone (the parent says go, or kills the child at its deadline)"),
    ("optiml/edits/atomics.py", "sub is not None or", "an identifier always has a parent; only a subscript has indices"),
    ("optiml/edits/reductions.py", "return None", "a value read only for its truth"),
    ("optiml/edits/atomics.py", 'text[i - 1:i + 2] != "&"',
     "a split at a `&&` leaves `& ...` on the right, which is never read as a mask"),
    ("optiml/verify/harness.py", "return 1", "a missing log's size: the log is opened before the child starts"),
    ("optiml/edits/templates/__init__.py", "if m else 1", "an unreadable arch is compared only with min_sm 0, 80 and 90"),
    ("optiml/edits/templates/aliases.py", "declared.get(name, 1)", "every name looked up was counted by the same walk"),
    ("optiml/edits/templates/rowwise.py", "n.end_byte < b for a, b, _ in edits",
     "an edited span ends in a bracket or is another identifier: no identifier inside one ends with it"),
    ("optiml/edits/templates/rowwise.py", "// 5 <= 49152",
     "the two-blocks-an-SM estimate's divisor: every point of the spaces was checked to choose alike"),
    ("optiml/gpus.py", 'split(",", 2)', "no GPU name holds a comma"),
    ("optiml/expr.py", "* 0.302 >= limit - 5",
     "equal only where a bit length times 0.302 is a whole number of characters: at no limit a caller gives"),
    ("optiml/generate/answers.py", "max(n, 1)", "n is at least 1: generate refuses --strategies under 1 first"),
    ("optiml/runner/prepare.py", "(base_seed - 1000003 * n)", "another set of distinct seeds for the same cases"),
    ("optiml/runner/prepare.py", "randbelow(2**32)", "each case's seed is taken modulo 2**31: the same cases, and --seed reproduces them"),
    ("optiml/cli/doctor.py", "timeout=61", "how long doctor waits for a tool's --version: one second more"),
    ("optiml/traces/html/render.py", "mtime=1", "a fixed gzip header time either way: the page is as reproducible"),
    ("optiml/traces/html/specs.py", '"height": 261', "a chart's height by one pixel: layout only"),
    ("optiml/traces/html/specs.py", '"height": 401', "a chart's height by one pixel: layout only"),
    ("optiml/traces/html/specs.py", '"tickMinStep": 2', "the least step between an axis's ticks: layout only"),
    ("optiml/verify/profiled.py", '"jobs.pkl", ppid):\n            return 1',
     "the exit code of a child told to quit before its jobs: nothing reads it"),
    ("optiml/procs.py", "timeout=31", "a wait after SIGKILL: the child is gone either way"),
    ("optiml/verify/worker_client.py", "timeout=31", "a wait after SIGKILL: the child is gone either way"),
    ("optiml/profiler/metrics.py", "dot >= 1", "no ncu metric name starts with a dot"),
    ("optiml/profiler/ncu_csv.py", "else -2", "only a grouping key for a launch without an id"),
    ("optiml/profiler/ncu_csv.py", "(len(header) + len(row))", "padding past the header, which zip drops"),
    ("optiml/profiler/ncu.py", "uuid.uuid4().hex[:13]", "the length of a random NVTX range name"),
    ("optiml/runner/judge.py", "d_rel is None and t.rel_rms is None", "a spec's rel_rms is None exactly for integer dtypes"),
    ("optiml/runner/runner.py", "sum(2 for it", "the upstream count is only compared with 0"),
    ("optiml/cluster/__init__.py", "spec.reference.is_python or spec.reference.path",
     "the loader sets a reference's path exactly when it is a Python function"),
    ("optiml/edits/transforms.py", "if v >= 1 else 0", "1's lower neighbour is halved to 0 and dropped either way"),
    ("optiml/runner/runner.py", "min_batch=2, workers_per_gpu=1", "one_slot's min_batch is capped at its max_batch of 1"),
    ("optiml/runner/runner.py", "timeout=601", "a thread's join at close: every thread is stopped before it"),
    ("optiml/app/generate.py", "== 'ok' or final.get('speedup')",
     "final_timing gives a speedup exactly when its status is ok"),
    ("optiml/traces/export.py", "if not TYPE_CHECKING", "the store's sqlite_utils imports pandas already"),
    ("optiml/draft/kernelbench.py", 'arrays[i][1] == "output"', "recognize_gemm reads only the scalars' roles"),
    ("optiml/source.py", "maxsize=2", "the parser cache's size: one parser is ever made"),
    ("optiml/traces/html/specs.py", '"right": 21', "a chart's padding by one pixel: layout only"),
    ("optiml/traces/html/specs.py", '"left": 41', "a chart's padding by one pixel: layout only"),
    ("optiml/traces/html/specs.py", '"bottom": 11', "a chart's padding by one pixel: layout only"),
    ("optiml/traces/html/specs.py", '"gradientLength": 161', "a legend's length by one pixel: layout only"),
    ("optiml/traces/html/specs.py", '"value": 37}', "a point's area by one square pixel: layout only"),
    ("optiml/traces/html/specs.py", '"value": 221}', "a point's area by one square pixel: layout only"),
    ("optiml/traces/html/specs.py", '"value": -2}', "the selection's empty value: no node is -1 or -2"),
    ("optiml/verify/calibrate.py", "[times[0]] * 4", "one time's quartiles: only the first three are read"),
    ("optiml/verify/gpu_timing.py", "max(2, (2 * gpu.l2_bytes)", "the flush size differs only for an L2 under 4 bytes"),
    ("optiml/verify/worker.py", "_reference_failure(result, sizes, e)\n                return None",
     "a value read only for its truth"),
)


def entry(file: str, old: str, new: str) -> tuple[str, str, str] | None:
    """The entry that lists a mutant of ``file`` (its old and new code) as equivalent, or None."""
    return next((e for e in EQUIVALENT if e[0] == file and e[1] in new and e[1] not in old), None)
