"""``run_generate``: from a spec with no kernel and a description to verified kernels (``optiml
generate``), with no click in it.

A new run stores the spec and a root node that stands for the description (its source is the
description as a comment; it is not a kernel, so its evaluation is ``source_error``, said so in its
message). The chat model is asked once for several distinct implementation strategies, then for one
complete kernel per strategy (:mod:`optiml.generate`). Each kernel is refused before it is built
when it lacks the spec's exact entry signature or a launch line (an ``edit_failed`` attempt with one
sentence), else it becomes a child of the root, written before its work, and is built, verified and
timed by the same runner as any candidate. A strategy whose kernel failed (refused, or any failure
status) is shown the failure once and asked for one repair, a second child of the root.

The verified strategies are then one search tree (:meth:`MCTS.from_records`, as ``--resume``
rebuilds one) whose root's time is that of the slowest verified strategy: the rewards and the final
figure are speedups over it. With ``then_optimize`` the search goes on from the strategies to the
budget (the strategies' kernels count in it) with the search's proposer, never asked to edit the
root. At the end the best and its rivals in its noise band are verified again and timed interleaved
with the slowest verified strategy (:func:`optiml.app.optimize.final_timing`), and the chosen kernel
is written. A run with no verified kernel ends as ``failed`` with one sentence (a UserError).
``resume=RUN`` continues a run this function started: stored answers are not asked again, stored
evaluations not run again.
"""
from __future__ import annotations

import random
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from loguru import logger

from ..errors import SpecError, UserError
from ..status import Status

DESCRIPTION = "description"          # the root's edit and proposer
PROPOSER = "generate"                # the strategies' kernels' proposer
REPAIRED = " (repaired)"
MAX_STRATEGIES = 12
ROOT_MESSAGE = ("the task's description, not a kernel: its children are the kernels generated for it "
                "(the search times them against the slowest verified one)")


@dataclass(frozen=True)
class GenerateOptions:
    spec: Path | None = None               # None with resume: the run's own
    describe: str | None = None
    strategies: int = 4
    then_optimize: bool = False
    budget: int | None = None              # with then_optimize: candidates in all, the strategies' included (200)
    resume: int | None = None
    seed: int = 0
    proposer: str = "llm"                  # the search's, with then_optimize: rules, llm or mixed
    llm_model: str | None = None
    llm_base_url: str | None = None
    llm_timeout_s: float = 120.0
    profile: bool = True
    db: Path = Path("optiml.db")
    arch: str | None = None
    timeout_s: float = 120.0
    gpus: str = "all"
    parallel: int | None = None
    build_jobs: int | None = None
    cluster: str | None = None
    output: Path | None = None             # None: SPEC.generated.cu beside the spec
    sanitize: str | None = None            # best (default), all, off


@dataclass(frozen=True)
class Outcome:
    """How one strategy ended: its last kernel's node (the repair's, when there was one)."""
    index: int                             # 1-based
    name: str
    status: str                            # ok, a failure status, or edit_failed (refused)
    message: str
    node: int | None                       # the store's node id (None: refused before it was built)
    median_ms: float | None
    repaired: bool

    def line(self) -> str:
        where = f"node {self.node}" if self.node is not None else "no node"
        figure = f" {self.median_ms:.4g} ms" if self.median_ms else ""
        why = "" if self.status == "ok" or not self.message else f" ({' '.join(self.message.split())[:120]})"
        return (f"strategy {self.index} {self.name!r}: {where} {self.status}{figure}"
                f"{' after one repair' if self.repaired else ''}{why}")


@dataclass(frozen=True)
class GenerateResult:
    run_id: int
    strategies: tuple[Outcome, ...]
    evaluations: int
    best_node: int
    slowest_node: int                      # the slowest verified strategy's node
    best_source: str
    best_path: tuple[str, ...]
    final: dict
    output: Path
    sanitize: str = "best"

    def line(self) -> str:
        final = self.final
        verified = sum(o.status == "ok" for o in self.strategies)
        head = (f"run {self.run_id}: {verified} of {len(self.strategies)} strategies verified, "
                f"{self.evaluations} candidates; best")
        if final.get("status") == "ok" and final.get("speedup"):
            low, high = final.get("speedup_low"), final.get("speedup_high")
            interval = f"95 % {low:.2f}-{high:.2f}x; " if low and high else ""
            figure = (f"{final['speedup']:.2f}x over the slowest verified strategy ({interval}{final['seed_ms']:.4f} "
                      f"-> {final['best_ms']:.4f} ms, re-verified and timed interleaved)")
        else:
            figure = f"node {self.best_node} (the final re-timing failed: {final.get('status')}: {final.get('message')})"
        return (f"{head} {figure}; path: {'; '.join(self.best_path)}; written to {self.output}")


@dataclass(frozen=True)
class Event:
    """One thing the generation did, as a line of its log."""
    text: str


def load_generate_spec(path: Path):
    """The spec of ``optiml generate``: no kernel, so ``[launch]`` may be left out (each generated
    kernel states its own), and the reference must be a Python function."""
    from ..spec import load_spec, parse_spec
    from ..spec.load import warn_todos

    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SpecError(f"{path}: spec file not found.") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SpecError(f"{path}: cannot read the spec ({getattr(e, 'strerror', None) or e}).") from None
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as e:
        raise SpecError(f"{path}: not valid TOML ({' '.join(str(e).split())}).") from None
    if "launch" in data:
        spec = load_spec(path)
    else:         # every generated kernel must carry its launch line; this one is never used
        spec = parse_spec(dict(data, launch={"grid": [1], "block": [1]}), path)
        warn_todos(path, text)
    if not spec.reference.is_python:
        raise UserError(f"{path}: optiml generate needs [reference] python = 'file.py:function': there is no "
                        f"kernel to compare the generated ones with.")
    if spec.tune:
        raise UserError(f"{path}: [tune] names a given kernel's parameters; remove it for optiml generate.")
    return spec


def root_source(description: str) -> str:
    """The root's source: the description as a comment (no kernel in it)."""
    body = "".join(f"// {line}\n" for line in description.strip().splitlines())
    return f"// optiml generate: {ROOT_MESSAGE}.\n{body}"


def run_generate(opts: GenerateOptions, on_event: Callable[[Event], None] | None = None,
                 on_progress=None, on_search_end: Callable[[], None] | None = None,
                 on_candidate=None) -> GenerateResult:
    """Generate, verify and time the strategies' kernels (and search on from them with
    ``then_optimize``); raises UserError for what a user can fix and when no kernel verified.
    ``on_event`` tells each step of the generation; ``on_progress``/``on_candidate``/``on_search_end``
    follow the search as in :func:`optiml.app.optimize.run_optimize`. Ctrl-C once the run is stored
    raises :class:`optiml.app.optimize.Interrupted`; a new database this call created is removed when
    it fails before a run starts."""
    from .optimize import stored_run

    return stored_run(opts.db, opts.resume, lambda state: _run_generate(
        opts, on_event or (lambda e: None), on_progress, on_search_end, on_candidate, state))


def _check(opts: GenerateOptions) -> None:
    if opts.sanitize not in (None, "best", "all", "off"):
        raise UserError(f"--sanitize takes best, all or off, not {opts.sanitize!r}.")
    if opts.proposer not in ("rules", "llm", "mixed"):
        raise UserError(f"--proposer takes rules, llm or mixed, not {opts.proposer!r}.")
    if not 1 <= opts.strategies <= MAX_STRATEGIES:
        raise UserError(f"--strategies must be between 1 and {MAX_STRATEGIES}, not {opts.strategies}.")
    for flag, value in (("--budget", opts.budget), ("--parallel", opts.parallel), ("--jobs", opts.build_jobs)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1, not {value}.")


def _run_generate(opts: GenerateOptions, on_event, on_progress, on_search_end, on_candidate, state) -> GenerateResult:
    from ..build import nvcc_version, resolve_arch
    from ..edits.llm import LLMConfig
    from ..generate import Chat
    from ..gpus import gpu_facts, parse_gpus, require_gpu, visible_gpus
    from ..runner import Preparer, Runner, standard_stages
    from ..traces.store import TraceStore
    from .evaluator import RunnerEvaluator
    from .optimize import _builder

    _check(opts)
    store = state["store"] = TraceStore(opts.db, create=opts.resume is None)
    if opts.resume is None:
        if opts.spec is None:
            raise UserError("give the SPEC of the kernel to generate (a task spec with no kernel), or --resume RUN.")
        if not (opts.describe or "").strip():
            raise UserError("--describe is required: say in a sentence what the kernel computes, e.g. "
                            "--describe \"row-wise softmax of an R x C float32 matrix\".")
        spec = load_generate_spec(opts.spec)
        budget = 200 if opts.budget is None else opts.budget
        config = {"generate": True, "describe": opts.describe.strip(), "strategies": opts.strategies,
                  "then_optimize": opts.then_optimize, "budget": budget, "seed": opts.seed, "proposer": opts.proposer,
                  "profile": opts.profile, "sanitize": opts.sanitize or "best", "spec": str(spec.path.resolve()),
                  "llm_model": opts.llm_model, "llm_base_url": opts.llm_base_url}
    else:
        run = store.run(opts.resume)
        config = dict(run["config"] or {})
        if not config.get("generate"):
            raise UserError(f"run {opts.resume} was not started by optiml generate; continue it with "
                            f"optiml optimize --resume {opts.resume}.")
        spec_file = opts.spec or Path(config.get("spec") or "")
        if not spec_file.is_file():
            raise UserError(f"run {opts.resume}'s spec {spec_file} is gone; pass the same spec as SPEC.")
        if spec_file.read_text() != run["spec_toml"]:
            raise UserError(f"{spec_file} changed since run {opts.resume} started; its results would not compare "
                            f"(start a new run).")
        spec = load_generate_spec(spec_file)
        config["then_optimize"] = bool(config.get("then_optimize")) or opts.then_optimize
        budget = opts.budget if opts.budget is not None else int(run["budget"] or config.get("budget") or 200)
        config["budget"] = budget
    description = config["describe"]
    sanitize = opts.sanitize or config.get("sanitize") or "best"
    llm_model, llm_base_url = opts.llm_model or config.get("llm_model"), opts.llm_base_url or config.get("llm_base_url")
    chat = Chat.from_config(LLMConfig.from_env(model=llm_model, base_url=llm_base_url, timeout_s=opts.llm_timeout_s))
    search_proposer = None
    if config["then_optimize"]:
        from .optimize import make_proposer

        search_proposer = make_proposer(config.get("proposer") or "llm", llm_model, llm_base_url,
                                        opts.llm_timeout_s, spec)
    require_gpu("generate")
    devices = parse_gpus(opts.gpus, visible_gpus())
    parallel = opts.parallel or 16 * len(devices)
    stub = root_source(description)
    prep = Preparer(spec, stub, _builder(resolve_arch(opts.arch), opts.cluster), include_dir=spec.path.resolve().parent,
                    kernel_name="generated.cu")
    if opts.resume is None:
        device, driver = gpu_facts()
        run_id = state["run"] = store.start_run(spec.entry, spec_toml=spec.path.read_text(), kernel_source=stub,
                                                config=config, seed=opts.seed, budget=budget, device=device,
                                                nvcc_version=nvcc_version(), driver_version=driver)
        _store_root(store, run_id, stub, description)
    else:
        run_id = state["run"] = opts.resume
        store.set_run_budget(run_id, budget)
        store.set_run_status(run_id, "running")
        store.reset_stale(run_id)
        if store.nodes(run_id, "running"):
            raise UserError(f"run {run_id} is being worked on by another live optiml process; wait for it or stop it.")
    from ..profiler.ncu import NcuProfiler
    from ..verify.worker_client import WorkerHarness

    sanitizer = None
    if sanitize != "off":
        from ..verify.sanitizer import Sanitizer

        sanitizer = Sanitizer()
    stages = standard_stages(prep, NcuProfiler() if opts.profile and config.get("profile", True) else None,
                             sanitizer=sanitizer, sanitize=sanitize if sanitizer is not None else "asked")
    with Runner(stages, devices, harness_factory=lambda d: WorkerHarness(d, timeout_s=opts.timeout_s),
                build_workers=opts.build_jobs) as runner:
        evaluator = RunnerEvaluator(runner)
        gen = Generation(store, run_id, spec, description, chat, evaluator, int(config["strategies"]),
                         seed=int(config.get("seed") or 0), on_event=on_event)
        outcomes = gen.run()
        verified = [o for o in outcomes if o.status == "ok" and o.median_ms]
        if not verified:
            what = "; ".join(f"{o.name}: {o.status}" for o in outcomes) or "the model named no strategy"
            message = (f"run {run_id}: none of the {len(outcomes)} strategies gave a verified kernel ({what}); "
                       f"see optiml show {run_id} --db {opts.db}")
            store.set_run_result(run_id, {"status": "no_verified_kernel", "message": message})
            store.set_run_status(run_id, "failed")
            raise UserError(message)
        baseline_id = max(verified, key=lambda o: (o.median_ms, -o.node)).node
        search = gen.search(baseline_id, search_proposer, budget, parallel, seed=int(config.get("seed") or 0))
        store_ids = search.observer.ids          # search node id -> store node id (before a Tee wraps it)
        if config["then_optimize"]:
            from .optimize import _search

            try:
                _search(search, evaluator, budget, True, on_progress, on_candidate)
            finally:
                if on_search_end is not None:
                    on_search_end()
        else:
            search.settle()
        baseline = next(n for n in search.nodes if store_ids.get(n.id) == baseline_id)
        best, final = final_choice(runner, search, baseline, sanitize=sanitizer is not None, ids=store_ids)
    if best is not None:
        from .optimize import speed_of_light_figure

        final["best_node"] = store_ids[best.id]
        sol = speed_of_light_figure(spec, best.source, final, gpu_facts()[0] or "")
        if sol is not None:
            final["speed_of_light"] = sol
    final["slowest_strategy_node"] = baseline_id      # what seed_ms times: the slowest verified strategy
    store.set_run_result(run_id, final)
    store.set_run_status(run_id, "done")
    if best is None:
        raise UserError(f"run {run_id}: no safe kernel to write: {final['message']}")
    out = opts.output or spec.path.with_suffix(".generated.cu")
    text = _kernel_text(store, run_id, final)
    try:
        out.write_text(text)
    except OSError as e:
        raise UserError(f"{out}: cannot write the best kernel ({e.strerror}); it is kept in the database: "
                        f"optiml best {run_id} -o FILE") from None
    return GenerateResult(run_id=run_id, strategies=tuple(gen.outcomes()), evaluations=search.evaluations,
                          best_node=final["best_node"], slowest_node=baseline_id, best_source=best.source,
                          best_path=tuple(best.path()), final=final, output=out, sanitize=sanitize)


def _store_root(store, run_id: int, stub: str, description: str) -> None:
    """The root node: the description, finished as what it is (no kernel to build)."""
    from ..search.result import Result

    root = store.add_node(run_id, None, stub, flags={"extra": []}, edit=DESCRIPTION, rationale=description,
                          proposer=DESCRIPTION)
    result = Result(str(Status.SOURCE_ERROR), ROOT_MESSAGE)
    store.finish_node(root, {"status": str(Status.SOURCE_ERROR), "result": result.to_dict(),
                             "verify": {"message": ROOT_MESSAGE}}, "failed")


def _kernel_text(store, run_id: int, final: dict) -> str:
    """The best kernel's file: the stored node under the usual header, with a line giving the final
    figure over the slowest verified strategy."""
    from ..traces.kernel_file import kernel_file

    text = kernel_file(store, run_id, final["best_node"])
    if final.get("status") == "ok" and final.get("speedup"):
        head, _, rest = text.partition("\n")
        line = (f"// optiml generate: {final['speedup']:.2f}x over the slowest verified strategy (node "
                f"{final['slowest_strategy_node']}: {final['seed_ms']:.4g} ms -> {final['best_ms']:.4g} ms, timed interleaved)")
        text = f"{head}\n{line}\n{rest}"
    return text


class SkipDescription:
    """The search's proposer, asked nothing for the root: it stands for the description, not a
    kernel to edit (the root is exhausted after its first call)."""

    def __init__(self, proposer, root_source: str):
        self.proposer, self.root_source = proposer, root_source
        self.name = proposer.name

    def propose(self, node, k: int, rng) -> list:
        return [] if node.source == self.root_source else list(self.proposer.propose(node, k, rng))


class NoProposer:
    """The proposer of a search that is not run on (``optiml generate`` without ``--then-optimize``)."""
    name = "none"

    def propose(self, node, k: int, rng) -> list:
        return []


def final_choice(runner, search, baseline, sanitize: bool = False, ids=None):
    """The final choice and figure: the best verified kernel by the search's rule, the search's root
    (the description) left out, and the others within its noise band, verified again and timed
    interleaved with ``baseline`` (the slowest verified strategy) by
    :func:`optiml.app.optimize.final_timing`; a chosen kernel found wrong on the final job's fresh
    inputs (:func:`optiml.app.optimize.wrong_at_the_end`), or with ``sanitize`` unsafe, is marked so
    and the choice made again. Returns (chosen, final); chosen is None when every verified
    kernel is unsafe. ``ids``: the search's node ids as the store's, for the figure's words."""
    from ..best import Ranked, choose_best, in_band
    from .optimize import FINAL_CONTENDERS, final_timing, wrong_at_the_end

    while True:
        ok = [n for n in search.nodes if n is not search.root and n.status == Status.OK and n.median_ms
              and not n.unsafe]
        ranked = [Ranked(n, n.median_ms, n.spread, n.depth, n.id) for n in ok]
        pick = choose_best(ranked)
        if pick is None:
            return None, {"status": str(Status.UNSAFE),
                          "message": "every verified kernel is unsafe under compute-sanitizer"}
        best = pick.key
        rivals = [r.key for r in in_band(ranked) if r.key is not best][:FINAL_CONTENDERS - 1]
        chosen, final = final_timing(runner, baseline, best, sanitize=sanitize, rivals=rivals, ids=ids)
        if wrong_at_the_end(search, baseline, chosen, final):
            continue
        if chosen is baseline and final.get("message", "").startswith("the seed is the best"):
            final["message"] = final["message"].replace("the seed is the best",
                                                        "the slowest verified strategy is also the best", 1)
        verdict = final.get("sanitize") or {}
        if verdict.get("status") != "unsafe":
            return chosen, final
        message = verdict.get("message") or "unsafe under compute-sanitizer"
        search.amend(chosen, replace(chosen.result, status=Status.UNSAFE, message=message, sanitize=verdict))
        logger.warning("the chosen kernel (node {}) is unsafe: {}", chosen.id, message)


class Generation:
    """The strategies of one run and their kernels: asked, checked, stored and evaluated, each
    strategy with at most one repair; what is stored already (a resumed run) is taken as it is.

    Nodes are kept in memory as the search's nodes (``optiml.search.tree.Node``) with the ids the
    search rebuilt from the store will give them (their order in the run), so the store's observer
    writes them exactly as it writes a search's."""

    def __init__(self, store, run_id: int, spec, description: str, chat, evaluator, n: int, *, seed: int,
                 on_event: Callable[[Event], None] = lambda e: None):
        from .records import StoreObserver, resume_ids, stored_records

        self.store, self.run_id, self.spec, self.description = store, run_id, spec, description
        self.chat, self.evaluator, self.n, self.seed, self.on_event = chat, evaluator, n, seed, on_event
        records = stored_records(store, run_id)
        ids = resume_ids(records)
        self.observer = StoreObserver(store, run_id, evaluator, ids=ids)
        by_store = {sid: i for i, sid in ids.items()}
        self.records = records                 # node and attempt records, as stored
        self.root = self._node(0, None, records[0])
        self.root_store_id = ids[0]
        self.nodes = {0: self.root}
        self.by_store = by_store
        self.keys: set = set()
        self.strategies: list = []
        self.exchanges: list[dict] = []
        self._next = len(ids)

    # -- records ------------------------------------------------------------------------------

    @staticmethod
    def _node(i: int, parent, rec: dict):
        from ..search.result import Result
        from ..search.tree import Node

        node = Node(id=i, parent=parent, source=rec["source"], flags=tuple(rec.get("flags") or ()),
                    edit=rec.get("edit", ""), rationale=rec.get("rationale", ""), proposer=rec.get("proposer", ""),
                    prior=rec.get("prior", 1.0), call=rec.get("call"))
        node.status = rec["status"]
        if rec["status"] not in (Status.PENDING, Status.RUNNING):
            node.result = Result.from_dict(dict(rec.get("result") or {}, status=rec["status"]))
        return node

    def _title(self, i: int) -> str:
        return f"strategy {i + 1}: {self.strategies[i].name}"

    def _latest(self, edit: str) -> dict | None:
        """The newest stored record (node or attempt) from the root with this edit."""
        found = [r for r in self.records if r.get("edit") == edit and r.get("parent") == self.root_store_id]
        return found[-1] if found else None

    # -- asking -------------------------------------------------------------------------------

    def _seed(self, what: str) -> int:
        return random.Random(f"{self.seed}:generate:{what}").randrange(2**31)

    def _strategies_stored(self):
        from ..generate import Strategy

        for p in self.store.proposals(run_id=self.run_id):
            parsed = p.get("parsed_edits")
            if p.get("kind") == "exchange" and p.get("proposer") == PROPOSER and isinstance(parsed, dict) \
                    and "strategies" in parsed:
                return [Strategy(s["name"], s.get("detail", "")) for s in parsed["strategies"]]
        return None

    def _ask_strategies(self):
        from ..generate import parse_strategies, strategy_messages

        stored = self._strategies_stored()
        if stored is not None:
            return stored
        self.on_event(Event(f"asking {self.chat.model} for {self.n} strategies"))
        x = self.chat.ask(strategy_messages(self.spec, self.description, self.n), seed=self._seed("strategies"))
        found = [] if x["error"] else parse_strategies(x["raw_answer"], self.n)
        x["parsed_edits"] = {"strategies": [s.to_dict() for s in found]}
        if not found and not x["error"]:
            x["error"] = "the answer names no strategy (STRATEGY 1: ..., STRATEGY 2: ...)"
        self.store.record_proposal(self.run_id, node_id=self.root_store_id, proposer=PROPOSER, model=x["model"],
                                   prompt=x["prompt"], raw_answer=x["raw_answer"], parsed_edits=x["parsed_edits"],
                                   tokens_in=x["tokens_in"], tokens_out=x["tokens_out"], latency_s=x["latency_s"],
                                   error=x["error"], kind="exchange")
        if not found:
            self.store.set_run_result(self.run_id, {"status": "no_strategies", "message": x["error"]})
            self.store.set_run_status(self.run_id, "failed")
            raise UserError(f"run {self.run_id}: no strategies to write: {x['error']}.")
        if len(found) < self.n:
            logger.warning("the model named {} strategies of the {} asked for", len(found), self.n)
        return found

    def _ask_kernel(self, i: int, failed: dict | None = None):
        """Ask for strategy ``i``'s kernel (``failed``: the record of its failed one, for the repair),
        and take the answer: a pending node (returned) or a refused attempt (None)."""
        from ..edits.types import Proposal
        from ..generate import check_kernel, kernel_messages, parse_kernel, repair_messages
        from ..search.tree import attempt_record, node_key

        s = self.strategies[i]
        edit = self._title(i) + (REPAIRED if failed is not None else "")
        if failed is not None and failed.get("source") and failed["source"] != self.root.source:
            message = str((failed.get("result") or {}).get("message") or "")
            messages = repair_messages(self.spec, self.description, s.name, s.detail, failed["source"],
                                       failed["status"], message)
            self.on_event(Event(f"{self._title(i)}: {failed['status']}; asking for its one repair"))
        else:
            messages = kernel_messages(self.spec, self.description, s.name, s.detail,
                                       [t.name for t in self.strategies])
            if failed is None:
                self.on_event(Event(f"asking for the kernel of {self._title(i)}"))
        x = self.chat.ask(messages, seed=self._seed(edit))
        self.exchanges.append(x)        # alive while the observer knows it (it keys exchanges by id())
        kernel = parse_kernel(x["raw_answer"]) if not x["error"] else None
        error = x["error"] or kernel.error or check_kernel(self.spec, kernel.source)
        if error is None and node_key(kernel.source, ()) in self.keys:
            error = "the kernel is the same as one already generated for another strategy."
        if x.get("cut_off") and error:
            error = f"{error} ({x['cut_off']})"
        source = kernel.source if kernel is not None and kernel.source else self.root.source
        why = kernel.why if kernel is not None else ""
        rationale = f"{s.detail}" + (f" {why}" if why else "") + (
            f" (repair of its {failed['status']} kernel)" if failed is not None else "")
        x["parsed_edits"] = {"strategy": s.name, "title": kernel.title if kernel else "", "error": error}
        p = Proposal(source=source, flags=(), edit=edit, rationale=rationale.strip(), proposer=PROPOSER,
                     error=error, exchange=x)
        if error is not None:
            x["error"] = x["error"] or error
            rec = attempt_record(self.root, p, Status.EDIT_FAILED, error, None)
            self.observer.on_attempt(self.root, rec)
            self.records.append(dict({k: v for k, v in rec.items() if k != "exchange"}, parent=self.root_store_id))
            self.on_event(Event(f"{edit}: refused: {error}"))
            return None
        from ..search.tree import Node

        node = Node(id=self._next, parent=self.root, source=p.source, flags=(), edit=edit, rationale=p.rationale,
                    proposer=PROPOSER, call=None, exchange=x)
        self._next += 1
        self.root.children.append(node)
        self.observer.on_node_added(node)
        self.nodes[node.id] = node
        self.keys.add(node_key(node.source, ()))
        self.records.append(dict(node.record(), id=self.observer.ids[node.id], parent=self.root_store_id))
        return node

    # -- evaluating ---------------------------------------------------------------------------

    def _submit(self, node, inflight: dict) -> None:
        node.status = Status.RUNNING
        self.observer.on_node_started(node)
        inflight[node.id] = node
        self.evaluator.submit(node.id, node.source, node.flags)

    def _finish(self, node, result) -> None:
        from ..search.reward import reward

        node.status, node.result = result.status, result
        node.reward = reward(result, 0.0, None)        # rescored against the slowest verified strategy later
        node.visits, node.value_sum = 1, node.reward
        self.root.visits += 1
        self.root.value_sum += node.reward
        self.observer.on_node_evaluated(node)
        rec = next(r for r in self.records if r.get("id") == self.observer.ids[node.id])
        rec.update(status=str(node.status), result=result.to_dict())
        figure = f" {result.median_ms:.4g} ms" if result.ok and result.median_ms else ""
        why = "" if result.ok or not result.message else f" ({' '.join(str(result.message).split())[:160]})"
        self.on_event(Event(f"{node.edit}: node {self.observer.ids[node.id]} {node.status}{figure}{why}"))

    def run(self) -> list[Outcome]:
        """Every strategy to its end: verified, or failed after its one repair."""
        from ..search.tree import node_key

        self.strategies = self._ask_strategies()
        self.keys |= {node_key(r["source"], ()) for r in self.records[1:]
                      if r.get("id") is not None and r.get("parent") == self.root_store_id}
        inflight: dict = {}
        for i in range(len(self.strategies)):
            first, repair = self._latest(self._title(i)), self._latest(self._title(i) + REPAIRED)
            todo = repair if repair is not None else first
            if todo is None:
                node = self._ask_kernel(i)
                if node is None:
                    node = self._ask_kernel(i, failed=self._latest(self._title(i)))
            elif todo.get("id") is not None and todo["status"] in (Status.PENDING, Status.RUNNING):
                node = self._resumed(todo)
            elif repair is None and todo["status"] != Status.OK:
                node = self._ask_kernel(i, failed=first)
            else:
                continue
            if node is not None:
                self._submit(node, inflight)
        while inflight:
            for token, result in self.evaluator.wait():
                node = inflight.pop(token, None)
                if node is None:                    # a later verdict (the background sanitizer's)
                    self._amend(self.nodes[token], result)
                    continue
                self._finish(node, result)
                if not result.ok and not node.edit.endswith(REPAIRED):
                    i = next(j for j in range(len(self.strategies)) if node.edit == self._title(j))
                    again = self._ask_kernel(i, failed=self._latest(node.edit))
                    if again is not None:
                        self._submit(again, inflight)
        if hasattr(self.evaluator, "settle"):
            for token, result in self.evaluator.settle():
                self._amend(self.nodes[token], result)
        return self.outcomes()

    def _resumed(self, rec: dict):
        i = self.by_store[rec["id"]]
        node = self._node(i, self.root, dict(rec, status=str(Status.PENDING)))
        node.status = Status.PENDING
        self.root.children.append(node)
        self.nodes[i] = node
        return node

    def _amend(self, node, result) -> None:
        node.status, node.result = result.status, result
        self.observer.on_node_amended(node)
        rec = next(r for r in self.records if r.get("id") == self.observer.ids[node.id])
        rec.update(status=str(node.status), result=result.to_dict())

    def outcomes(self) -> list[Outcome]:
        out = []
        for i, s in enumerate(self.strategies):
            first, repair = self._latest(self._title(i)), self._latest(self._title(i) + REPAIRED)
            last = repair or first
            if last is None:
                continue
            result = last.get("result") or {}
            ok = last["status"] == Status.OK
            out.append(Outcome(i + 1, s.name, str(last["status"]), str(result.get("message") or ""), last.get("id"),
                               result.get("median_ms") if ok else None, repair is not None))
        return out

    # -- the search ---------------------------------------------------------------------------

    def search(self, baseline_id: int, proposer, budget: int, parallel: int, seed: int = 0):
        """The run's tree as a search (:meth:`MCTS.from_records`), its root timed as the baseline
        (the slowest verified strategy), with the stored rewards and statistics made the search's."""
        from ..edits.hygiene import IncludeGuard
        from ..search.mcts import MCTS, SearchConfig
        from .records import StoreObserver, resume_ids, stored_records

        records = stored_records(self.store, self.run_id)
        base = next(r for r in records if r.get("id") == baseline_id)
        root = records[0]
        root["status"] = str(Status.OK)
        root["result"] = {"status": str(Status.OK), "median_ms": base["result"]["median_ms"],
                          "spread": base["result"].get("spread"),
                          "message": f"{ROOT_MESSAGE}; timed as the slowest verified strategy, node {baseline_id}"}
        prop = SkipDescription(IncludeGuard(proposer, self.root.source, include_dirs=[self.spec.path.resolve().parent])
                               if proposer is not None else NoProposer(), self.root.source)
        ids = resume_ids(records)
        cfg = SearchConfig(budget=budget, seed=seed, parallel=parallel)
        search = MCTS.from_records(records, self.evaluator, prop, config=cfg,
                                   observer=StoreObserver(self.store, self.run_id, self.evaluator, ids=ids),
                                   task=f"{self.description}\n{self.spec.summary()}", entry=self.spec.entry)
        self._rescore(search, ids)
        return search

    def _rescore(self, search, ids: dict) -> None:
        """Store the rewards of the root's children as the search scores them (against the baseline),
        and every node's visits and value sum."""
        for node in search.root.children:
            e = self.store.evaluation(ids[node.id]) or {}
            if node.reward is not None and e.get("reward") != node.reward and node.status not in (
                    Status.PENDING, Status.RUNNING):
                self.store.amend_evaluation(ids[node.id], status=e["status"], result=e.get("result") or {},
                                            reward=node.reward,
                                            node_status="done" if e["status"] == Status.OK else "failed")
        self.store.update_stats_many([(ids[n.id], n.visits, n.value_sum) for n in search.nodes if n.id in ids])
