"""Readable text for a recorded run: the path from the seed to the best kernel, one candidate
in full, the list of runs. Functions return strings; the CLI prints them."""
from __future__ import annotations

import difflib
import json
import math
import re

from ..best import choose_best
from .limits import baseline_text, sol_text
from .store import OK, Node, TraceStore

MAX_DELTAS = 6

# how ``show`` names the metrics it reports; other keys are shown with spaces for underscores
LABELS = {
    "smem_ld_bank_conflicts": "shared load bank conflicts",
    "smem_st_bank_conflicts": "shared store bank conflicts",
    "smem_ld_wavefronts": "shared load wavefronts",
    "smem_st_wavefronts": "shared store wavefronts",
    "achieved_occupancy_pct": "achieved occupancy",
    "theoretical_occupancy_pct": "theoretical occupancy",
    "duration_ns": "kernel time (ns)",
    "dram_throughput_pct": "DRAM throughput",
    "l2_throughput_pct": "L2 throughput",
    "l1_throughput_pct": "L1/shared throughput",
    "sm_throughput_pct": "SM throughput",
    "memory_throughput_pct": "memory throughput",
    "tensor_pipe_active_pct": "tensor pipe active",
    "hmma_pipe_active_pct": "HMMA pipe active",
    "registers_per_thread": "registers per thread",
    "static_smem_per_block": "static shared memory per block (bytes)",
    "dynamic_smem_per_block": "dynamic shared memory per block (bytes)",
    "local_load_bytes": "local-memory loads (bytes)",
    "local_store_bytes": "local-memory stores (bytes)",
    "l2_hit_rate_pct": "L2 hit rate",
    "dram_bytes": "DRAM bytes",
}


def label(name: str) -> str:
    if name in LABELS:
        return LABELS[name]
    if name.startswith("stall_"):
        return name[len("stall_"):].replace("_", " ") + " stalls"
    return name.removesuffix("_pct").replace("_", " ")


def fmt_value(name: str, v) -> str:
    """1.9e9, 0, 94%, 0.125: short and unambiguous."""
    if v is None:
        return "-"
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return str(v)
    pct = name.endswith(("_pct", "_percent", "_pct_of_peak"))
    if v == 0:
        s = "0"
    elif float(v).is_integer() and abs(v) < 1e5:
        s = str(int(v))
    elif abs(v) >= 1e5 or abs(v) < 1e-3:
        g = f"{v:.2g}"
        s = f"{g.split('e')[0]}e{int(g.split('e')[1])}" if "e" in g else g
    else:
        s = f"{v:.3g}"
    return s + ("%" if pct else "")


def _changes(before: dict | None, after: dict | None) -> list[tuple[float, str, float, float]]:
    """(relative change, name, before, after) of each metric both have as a number that changed."""
    before, after = before or {}, after or {}
    out = []
    for name in sorted(set(before) & set(after)):
        a, b = before[name], after[name]
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)) or a == b:
            continue
        if any(math.isnan(x) for x in (a, b)):
            continue
        out.append((abs(b - a) / max(abs(a), abs(b)), name, a, b))
    return out


def metric_deltas(before: dict | None, after: dict | None, limit: int = MAX_DELTAS) -> list[str]:
    """``name a → b`` for the metrics that changed most (relative change), largest first."""
    changes = [c for c in _changes(before, after) if c[0] >= 0.05]
    changes.sort(key=lambda c: (c[1] not in LABELS, -c[0], c[1]))   # the named metrics first
    return [f"{label(n)} {fmt_value(n, a)} → {fmt_value(n, b)}" for _, n, a, b in changes[:limit]]


def source_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=old_name, tofile=new_name, n=2))


def _speed(seed_ms: float | None, ms: float | None) -> str:
    if ms is None:
        return "no time"
    if not seed_ms:
        return f"{ms:.4g} ms"
    return f"{seed_ms / ms:.2f}x vs seed ({seed_ms:.4g} ms → {ms:.4g} ms)"


def format_counts(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    parts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"candidates: {total} ({parts})" if total else "candidates: 0"


def format_path(store: TraceStore, run_id: int) -> str:
    """The path from the seed to the best verified kernel: for each step the rationale, the
    diff, the speedup over the seed and the metric deltas; then candidate counts by status."""
    run = store.run(run_id)
    lines = [f"run {run_id}: {run['task']} ({run['status']}, started {run['created_at'][:19]})"]
    pick = choose_best(store.verified(run_id))       # the search's own rule
    best = store.node(pick.key) if pick is not None else None
    root = store.root_node(run_id)
    generated = root is not None and root.proposer == GENERATED
    if generated:
        lines += _strategies(store, root)
    if best is None:
        lines.append("no verified candidate yet" + ("" if root else " (no seed recorded)"))
        lines.append(format_counts(store.status_counts(run_id)))
        return "\n".join(lines) + "\n"
    path = store.path_to(best.id)
    evals = {n.id: store.evaluation(n.id) or {} for n in path}
    seed_ms = evals[path[0].id].get("median_ms") if evals[path[0].id].get("status") == OK else None
    lines.append(f"root: node {path[0].id}, the description (not a kernel)" if generated else
                 f"seed: node {path[0].id}, {_speed(None, seed_ms)}")
    if len(path) == 1:
        lines.append("the seed is still the best verified kernel")
    for step, (parent, node) in enumerate(zip(path, path[1:]), 1):
        e, pe = evals[node.id], evals[parent.id]
        who = f" by {node.proposer}" if node.proposer else ""
        lines.append("")
        lines.append(f"step {step}: node {parent.id} → node {node.id}{who}: {_speed(seed_ms, e.get('median_ms'))}")
        if node.rationale:
            lines.append(f"  why: {node.rationale}")
        if node.edit:
            lines.append(f"  edit: {node.edit}")
        deltas = metric_deltas(pe.get("metrics"), e.get("metrics"))
        if deltas:
            lines.append("  metrics: " + ", ".join(deltas))
        diff = source_diff(store.source(parent.source_hash), store.source(node.source_hash),
                           f"node {parent.id}", f"node {node.id}")
        if node.flags != parent.flags:
            lines.append(f"  flags: {parent.flags or {}} → {node.flags or {}}")
        lines.append(diff.rstrip("\n") if diff else "  (same source)")
    lines.append("")
    final = run.get("result") or {}
    if final.get("status") == "ok" and final.get("speedup"):
        edits = "; ".join(final.get("best_edits") or []) or "the seed itself"
        lines.append(f"final: {final['speedup']:.2f}x ({final['seed_ms']:.4g} ms → {final['best_ms']:.4g} ms) for "
                     f"[{edits}], verified again on fresh inputs and timed interleaved with "
                     + (f"the slowest verified strategy (node {final.get('slowest_strategy_node')})" if generated
                        else "the seed") + " in one process")
    elif final:
        lines.append(f"final re-timing failed: {final.get('status')}: {final.get('message')}")
    limits = [t for t in (sol_text(final), baseline_text(final)) if t]
    if limits:
        lines.append("limit: " + "; ".join(limits))
    if final:
        lines.append(format_sanitize(final.get("sanitize")))
    if final.get("stopped"):
        lines.append(f"stopped: {final['stopped']}")
    lines.append(format_counts(store.status_counts(run_id)))
    lines += format_rewrites(store, run_id)
    return "\n".join(lines) + "\n"


# the rules proposer's edits by the rewrite that made them (first match wins)
_REWRITES = ((re.compile(r"^template "), "template"), (re.compile(r"^\w+ -?\d+ -> -?\d+$"), "tune"), (re.compile(r"^(\w[\w-]*): refused$"), None),
             (re.compile(r"^knob "), "knob"), (re.compile(r"^grid-stride"), "coarsen"), (re.compile(r"^float4"), "vectorize"),
             (re.compile(r"^accumulate"), "accumulate"), (re.compile(r"^cache "), "cache"),
             (re.compile(r"^warp-shuffle"), "shuffle"), (re.compile(r"^privatized atomics"), "privatize"),
             (re.compile(r"^partials of "), "partials"), (re.compile(r"^pad "), "pad"), (re.compile(r"^__restrict__"), "restrict"),
             (re.compile(r"^const "), "const"), (re.compile(r"^#pragma unroll"), "unroll"),
             (re.compile(r"^__launch_bounds__"), "launch_bounds"), (re.compile(r"^flag "), "flag"))


RULES = "rules"             # the rules proposer's name on its nodes (optiml.edits.rules.RulesProposer)


def rewrite_of(edit: str | None) -> str | None:
    """The rules proposer's rewrite behind an edit (``tune``, ``accumulate``, ``cache``, ...), None
    for edits it does not make."""
    for pattern, kind in _REWRITES:
        m = pattern.match(edit or "")
        if m:
            return kind or m.group(1)
    return None


def format_rewrites(store: TraceStore, run_id: int) -> list[str]:
    """The rules proposer's account of a run: per rewrite, the candidates it made, how many
    verified (what the others ended as) and the best speedup over the kernel it rewrote; then
    each rewrite it looked at and refused, with why."""
    nodes = store.nodes(run_id)
    evals = {n.id: store.evaluation(n.id) or {} for n in nodes}
    med = {i: e.get("median_ms") if e.get("status") == OK else None for i, e in evals.items()}
    stats: dict[str, dict] = {}
    for n in nodes:
        kind = rewrite_of(n.edit) if n.proposer == RULES and n.parent_id is not None else None
        if kind is None:
            continue
        e = evals[n.id]
        st = stats.setdefault(kind, {"made": 0, "ok": 0, "other": {}, "best": None})
        st["made"] += 1
        if e.get("status") == OK:
            st["ok"] += 1
            if med.get(n.parent_id) and med.get(n.id):
                r = med[n.parent_id] / med[n.id]
                st["best"] = r if st["best"] is None else max(st["best"], r)
        elif e.get("status"):
            st["other"][e["status"]] = st["other"].get(e["status"], 0) + 1
    refused: dict[str, list[str]] = {}
    for p in store.proposals(run_id=run_id):
        rec = p.get("parsed_edits") or {}
        if p.get("kind") == "attempt" and rec.get("status") == "refused":
            why = (rec.get("result") or {}).get("message") or p.get("error") or ""
            reasons = refused.setdefault(rewrite_of(rec.get("edit")) or rec.get("edit") or "-", [])
            if why not in reasons:
                reasons.append(why)
    if not stats and not refused:
        return []
    out = ["rewrites:"]
    for kind, st in sorted(stats.items(), key=lambda kv: (-kv[1]["made"], kv[0])):
        other = ", ".join(f"{v} {k}" for k, v in sorted(st["other"].items()))
        best = f"; best {st['best']:.2f}x over the kernel it rewrote" if st["best"] else ""
        out.append(f"  {kind}: {st['made']} made, {st['ok']} verified" + (f" ({other})" if other else "") + best)
    for kind, reasons in sorted(refused.items()):
        out.append(f"  {kind}: refused " + ("; ".join(reasons[:2]) + (f" (and {len(reasons) - 2} more)" if len(reasons) > 2 else "")))
    return out


GENERATED = "description"     # the proposer of an `optiml generate` run's root, which stands for the description


def _strategies(store: TraceStore, root: Node) -> list[str]:
    """An `optiml generate` run's root's children: each strategy's kernel with its status and time."""
    out = [f"description: {' '.join((root.rationale or '').split())}", "strategies:"]
    for n in store.nodes(root.run_id):
        if n.parent_id == root.id:
            e = store.evaluation(n.id) or {}
            ms = f"{e['median_ms']:.4g} ms" if e.get("status") == OK and e.get("median_ms") else "-"
            out.append(f"  node {n.id}: {e.get('status') or n.status}, {ms}  {n.edit}")
    return out


MAX_TABLE = 12


def metric_table(before: dict | None, after: dict | None, limit: int = MAX_TABLE) -> list[str]:
    """The metrics that differ most between ``before`` and ``after`` (relative change, largest
    first) as rows of a small table: name, before, after, change."""
    rows = _changes(before, after)
    rows.sort(key=lambda r: (-r[0], r[1]))
    cells = [(label(n), fmt_value(n, a), fmt_value(n, b), f"{(b - a) / abs(a):+.0%}" if a else "new")
             for _, n, a, b in rows[:limit]]
    if not cells:
        return []
    head = ("metric", "parent", "this", "change")
    w = [max(len(r[i]) for r in (head, *cells)) for i in range(4)]
    return ["  " + f"{r[0]:<{w[0]}}  {r[1]:>{w[1]}}  {r[2]:>{w[2]}}  {r[3]:>{w[3]}}".rstrip() for r in (head, *cells)]


def _resources(e: dict | None) -> dict:
    from .export import resources
    return resources(e or {})


def format_node(store: TraceStore, node_id: int) -> str:
    """One candidate, readable: status, time and speedup against its parent and the seed, edit and
    rationale, resources and the metrics that changed most against the parent, the sanitize
    verdict, the diff against the parent (the source, for the seed). ``format_node_raw`` has it all."""
    n: Node = store.node(node_id)
    e = store.evaluation(node_id) or {}
    parent = store.node(n.parent_id) if n.parent_id is not None else None
    pe = (store.evaluation(parent.id) or {}) if parent else {}
    root = store.root_node(n.run_id)
    re_ = (store.evaluation(root.id) or {}) if root else {}

    def ok_ms(ev: dict):
        return ev.get("median_ms") if ev.get("status") == OK else None

    ms, parent_ms, seed_ms = ok_ms(e), ok_ms(pe), ok_ms(re_)
    where = f"parent node {parent.id}" if parent else "the seed"
    out = [f"node {n.id} of run {n.run_id}: {e.get('status') or n.status}, depth {n.depth}, {where},"
           f" proposer {n.proposer or '-'}"]
    if ms is not None:
        spread = (e.get("result") or {}).get("spread")
        line = f"time: {ms:.4g} ms" + (f" (spread {spread:.1%})" if spread is not None else "")
        if parent and parent_ms:
            line += f"; {parent_ms / ms:.2f}x vs parent ({parent_ms:.4g} ms)"
        if parent and seed_ms:
            line += f"; {seed_ms / ms:.2f}x vs seed ({seed_ms:.4g} ms)"
        out.append(line)
    elif e:
        msg = (e.get("result") or {}).get("message") or (e.get("verify") or {}).get("message") or ""
        out.append(f"not verified: {e['status']}" + (f": {msg}" if msg else ""))
        if e.get("verify"):
            out.append("verify: " + ", ".join(f"{k} {fmt_value(k, v)}" for k, v in sorted(e["verify"].items())
                                               if not isinstance(v, (dict, list)) and k != "message"))
    else:
        out.append(f"not evaluated yet ({n.status})")
    for name, val in (("edit", n.edit), ("why", n.rationale),
                      ("flags", " ".join((n.flags or {}).get("extra") or ()))):
        if val:
            out.append(f"{name}: {val}")
    res, pres = _resources(e), _resources(pe)
    parts = []
    for key, name, unit in (("registers", "registers", ""), ("spills", "spills", " bytes"),
                            ("smem_static", "shared memory", " bytes")):
        get = (lambda r: (r.get("spill_stores") or 0) + (r.get("spill_loads") or 0) if r else None) \
            if key == "spills" else (lambda r, k=key: r.get(k))
        v, pv = get(res), get(pres)
        if v is None:
            continue
        parts.append(f"{name} {pv} → {v}{unit}" if parent and pv is not None and pv != v else f"{name} {v}{unit}")
    if parts:
        out.append(("resources vs parent: " if parent else "resources: ") + ", ".join(parts))
    table = metric_table(pe.get("metrics"), e.get("metrics")) if parent else []
    if table:
        out += [f"metrics that changed most vs parent (top {MAX_TABLE}):", *table]
    elif e.get("metrics"):
        out.append(f"metrics: {len(e['metrics'])} recorded (--raw lists them)")
    out.append(format_sanitize((e.get("result") or {}).get("sanitize")))
    if parent:
        diff = source_diff(store.source(parent.source_hash), store.source(n.source_hash),
                           f"node {parent.id}", f"node {n.id}")
        out += ["", f"--- diff vs parent node {parent.id}", diff.rstrip("\n") if diff else "(same source)"]
    else:
        out += ["", f"--- source {n.source_hash[:12]}", store.source(n.source_hash).rstrip("\n")]
    if n.proposal_id is not None:
        for p in store.proposals(proposal_id=n.proposal_id):
            out += _call_lines(p, "the proposer call behind it")
    return "\n".join(out) + "\n"


def _call_lines(p: dict, what: str) -> list[str]:
    """A proposer call (an LLM exchange): who, tokens, time and the answer."""
    lines = ["", f"--- {what}: proposal {p['id']} from {p['proposer'] or '-'} / {p['model'] or '-'}:"
                 f" {p['tokens_in'] or 0} in, {p['tokens_out'] or 0} out tokens, {fmt_value('s', p['latency_s'])} s"]
    if p["error"]:
        lines.append(f"error: {p['error']}")
    if p["raw_answer"]:
        lines.append(p["raw_answer"].rstrip("\n"))
    return lines


def format_node_raw(store: TraceStore, node_id: int) -> str:
    """One candidate in full: where it sits, its source, its evaluation and logs, its proposals."""
    n: Node = store.node(node_id)
    e = store.evaluation(node_id)
    visits, value = store.subtree_stats(n.id)        # derived: older databases stored stale figures
    out = [f"node {n.id} of run {n.run_id}: {n.status}, depth {n.depth}, parent {n.parent_id},"
           f" proposer {n.proposer or '-'}, visits {visits}, value {value:.4g}"]
    for label, val in (("why", n.rationale), ("edit", n.edit), ("flags", n.flags)):
        if val:
            out.append(f"{label}: {val}")
    out += ["", f"--- source {n.source_hash[:12]}", store.source(n.source_hash).rstrip("\n"), ""]
    if e is None:
        out.append("evaluation: none yet")
    else:
        out.append(f"evaluation: {e['status']}, median {fmt_value('ms', e['median_ms'])} ms,"
                   f" reward {fmt_value('r', e['reward'])} ({e['reward_version'] or '-'}),"
                   f" wall {fmt_value('s', e['wall_s'])} s")
        for key in ("build", "verify", "timing", "diagnosis"):
            if e[key]:
                out.append(f"{key}: {json.dumps(e[key], sort_keys=True)}")
        if e["metrics"]:
            out.append("metrics:")
            out += [f"  {k} = {fmt_value(k, v)}" for k, v in sorted(e["metrics"].items())]
        if e["build_log"]:
            out += ["--- build log", e["build_log"].rstrip("\n")]
        if e["raw_ncu_csv"]:
            out.append(f"raw ncu csv: {len(e['raw_ncu_csv'].splitlines())} lines (in the database)")
    if n.proposal_id is not None:
        for p in store.proposals(proposal_id=n.proposal_id):
            out += _call_lines(p, "the proposer call behind it")
    made = store.proposals(node_id=node_id)
    for p in made:
        if p.get("kind") != "attempt":
            out += _call_lines(p, "made from this node")
    failed = [p for p in made if p.get("kind") == "attempt"]
    if failed:
        out += ["", "--- tried from this node without a new candidate:"]
        for p in failed:
            rec = p["parsed_edits"] or {}
            out.append(f"  {rec.get('edit') or '-'}: {rec.get('status') or '-'}: {p['error'] or ''}")
    return "\n".join(out) + "\n"


def _best_cell(r: dict) -> str:
    """The final interleaved figure when the run has one, else the best seen during the search (~)."""
    if r.get("final_speedup"):
        return f"{r['final_speedup']:.2f}x"
    return f"~{r['best_speedup']:.2f}x" if r.get("best_speedup") else "-"


def format_runs(rows: list[dict]) -> str:
    """The ``optiml runs`` table."""
    if not rows:
        return "no runs recorded\n"
    head = ("run", "task", "status", "evaluated", "best", "speed of light", "vs baseline", "started")
    body = [(str(r["id"]), r["task"], r["status"],
             f"{r['evaluated']}/{r['budget']}" if r["budget"] else str(r["evaluated"]),
             _best_cell(r), r.get("speed_of_light") or "-", r.get("vs_baseline") or "-",
             r["created_at"][:19].replace("T", " "))
            for r in rows]
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                     for row in (head, *body)) + "\n"


def format_sanitize(verdict: dict | None) -> str:
    """What compute-sanitizer made of the written kernel, in one line."""
    if not verdict:
        return "sanitize: not sanitized"
    if verdict.get("status") == "clean":
        return f"sanitize: passed {', '.join(verdict.get('tools') or [])}"
    if verdict.get("status") == "unsafe":
        return f"sanitize: UNSAFE: {verdict.get('message')}"
    return f"sanitize: not sanitized ({verdict.get('message')})"
