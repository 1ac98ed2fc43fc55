"""What the HTML report shows of one stored run, gathered from the trace store alone.

:func:`report_data` returns plain JSON-able values in three parts: ``summary`` (the figures at the
top of the page), ``nodes`` and ``points`` (one light record per candidate, for the tree and the
chart) and ``details`` (per candidate what a click shows: edit, rationale, diff to the parent,
ptxas resources, metric deltas, diagnosis, messages, and the LLM exchange behind it; sources and
exchanges once each). The text pieces come from :mod:`optiml.traces.report`, the functions
``optiml show`` prints with, so the page and the terminal say the same things."""
from __future__ import annotations

from collections import Counter
from datetime import datetime

from ...best import choose_best
from ...status import Category, category
from ..export import resources
from ..limits import baseline_ratio, baseline_text, sol_text
from ..report import fmt_value, format_sanitize, label, metric_table, source_diff
from ..store import OK, TraceStore

MAX_LOG = 6000            # characters of a build log kept per candidate (the database has it all)
MAX_EXAMPLES = 3          # distinct messages shown per failing status
RESOURCE_KEYS = ("registers", "spill_stores", "spill_loads", "smem_static", "smem_dynamic", "cmem",
                 "stack_frame", "barriers")


def _round(v: float | None, digits: int = 5) -> float | None:
    """Enough digits for a picture and a tooltip; fewer bytes in the page."""
    return None if v is None else float(f"{v:.{digits}g}")


def _ok_ms(e: dict | None) -> float | None:
    return e.get("median_ms") if e and e.get("status") == OK else None


def _message(e: dict | None) -> str:
    """The verification or failure message of an evaluation (the search's, else the harness's)."""
    if not e:
        return ""
    return ((e.get("result") or {}).get("message") or (e.get("verify") or {}).get("message") or "").strip()


def _seconds(a: str | None, b: str | None) -> float | None:
    try:
        return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()
    except (TypeError, ValueError):
        return None


def _clip(text: str | None, limit: int = MAX_LOG) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters in the database)"


def _resource_rows(res: dict, pres: dict | None) -> list[list]:
    """ptxas's figures: [name, parent's, this one's], the known keys first."""
    keys = [k for k in RESOURCE_KEYS if k in res] + sorted(k for k in res if k not in RESOURCE_KEYS)
    rows = []
    for k in keys:
        v = res[k]
        if isinstance(v, (dict, list)):
            continue
        pv = (pres or {}).get(k)
        rows.append([k.replace("_", " "), None if pres is None else pv, v])
    return rows


def _verify_facts(e: dict) -> str:
    """A failed verification's figures in one line (max_abs_err 3, mismatched 12...), as ``show --node``."""
    v = e.get("verify") or {}
    return ", ".join(f"{k} {fmt_value(k, x)}" for k, x in sorted(v.items())
                     if not isinstance(x, (dict, list)) and k != "message" and x is not None)


def _limits(final: dict) -> dict:
    """How far from the limit, when the run stored it (the ``speed_of_light`` and ``baseline``
    in the final figure), in :mod:`optiml.traces.limits`'s words, as ``show`` says it."""
    out = {}
    sol = final.get("speed_of_light") or {}
    if isinstance(sol.get("fraction"), (int, float)):
        out["sol_fraction"], out["sol_text"] = sol["fraction"], sol_text(final)
    if final.get("baseline"):
        out["baseline_text"] = baseline_text(final)
        ratio = baseline_ratio(final)
        if ratio is not None:
            out["baseline_ratio"] = ratio
    return out


def report_data(store: TraceStore, run_id: int, best_id: int | None = None) -> dict:
    """Run ``run_id`` as the report shows it. ``best_id``: the node to mark as the best (the CLI
    passes ``app.records.best_of_run``'s: the one the final figure names); None: the best stored
    node by the search's rule (:func:`optiml.best.choose_best`)."""
    run = store.run(run_id)
    nodes = store.nodes(run_id)
    evals = {n.id: store.evaluation(n.id) for n in nodes}
    by_id = {n.id: n for n in nodes}
    root = next((n for n in nodes if n.parent_id is None), None)
    # speedups are over the seed; an optiml generate run has no seed kernel (its root is the
    # description): there they are over the slowest verified strategy, which its final figure times
    base_id = (run.get("result") or {}).get("slowest_strategy_node")
    base = by_id.get(base_id) or root
    seed_ms = _ok_ms(evals.get(base.id)) if base else None
    base_label = "the seed" if base is root else "the slowest verified strategy"
    if best_id is None:
        pick = choose_best(store.verified(run_id))
        best_id = pick.key if pick is not None else None
    path = [n.id for n in store.path_to(best_id)] if best_id in by_id else []
    on_path = set(path)

    # evaluation order: the order the evaluations were written (their rows' ids)
    evaluated = sorted((n for n in nodes if evals[n.id] is not None), key=lambda n: evals[n.id]["id"])
    order = {n.id: i for i, n in enumerate(evaluated)}

    def status_of(n) -> str:
        e = evals[n.id]
        return e["status"] if e else n.status

    def speedup(n) -> float | None:
        ms = _ok_ms(evals[n.id])
        return seed_ms / ms if seed_ms and ms else None

    def label(n) -> str:     # the edit that made it; the seed is the root (a child with none says nothing)
        return n.edit or ("seed" if n.parent_id is None else "")

    light = []
    for n in nodes:
        st = status_of(n)
        e = evals[n.id]
        light.append({"id": n.id, "parent": n.parent_id, "depth": n.depth, "status": st,
                      "category": str(category(st)), "speedup": _round(speedup(n)), "ms": _round(_ok_ms(e)),
                      "edit": label(n), "proposer": n.proposer or "",
                      "order": order.get(n.id), "path": n.id in on_path, "best": n.id == best_id})

    points, best_so_far = [], None
    for n in evaluated:
        s = speedup(n)
        if s is not None:
            best_so_far = s if best_so_far is None else max(best_so_far, s)
        points.append({"order": order[n.id], "node": n.id, "status": status_of(n), "speedup": _round(s),
                       "y": _round(s) if s is not None else 0.0, "best": _round(best_so_far),
                       "edit": label(n)})

    proposals = store.proposals(run_id=run_id)
    exchanges = {p["id"]: p for p in proposals if p.get("kind") != "attempt" and (p["prompt"] or p["raw_answer"])}
    attempts: dict[int, list] = {}
    for p in proposals:
        if p.get("kind") == "attempt" or (p.get("kind") is None and p["id"] not in exchanges):
            rec = p["parsed_edits"] if isinstance(p["parsed_edits"], dict) else {}
            attempts.setdefault(p["node_id"], []).append(
                [rec.get("edit") or "-", rec.get("status") or "-", (p["error"] or "").strip()])

    details, sources, used_exchanges = {}, {}, {}
    for n in nodes:
        details[n.id] = _details(store, n, by_id, evals, seed_ms, sources, exchanges, used_exchanges,
                                 attempts.get(n.id, []), status_of(n))

    summary = _summary(store, run, nodes, evals, root, seed_ms, best_id, path, proposals, exchanges)
    summary["base"] = base_label
    return {"summary": summary, "nodes": light, "points": points,
            "failures": _failures(nodes, evals, status_of, proposals, attempts),
            "details": {"nodes": details, "sources": sources, "exchanges": used_exchanges}}


def _details(store, n, by_id, evals, seed_ms, sources, exchanges, used_exchanges, attempts, status) -> dict:
    e = evals[n.id] or {}
    parent = by_id.get(n.parent_id)
    pe = (evals.get(parent.id) or {}) if parent else {}
    src = store.source(n.source_hash)
    sources.setdefault(n.source_hash, src)
    ms, parent_ms = _ok_ms(e), _ok_ms(pe)
    d = {"id": n.id, "parent": n.parent_id, "depth": n.depth, "status": status, "node_status": n.status,
         "category": str(category(status)), "edit": n.edit or "", "rationale": n.rationale or "",
         "proposer": n.proposer or "", "source": n.source_hash, "message": _message(e),
         "flags": " ".join((n.flags or {}).get("extra") or ()), "ms": ms,
         "spread": (e.get("result") or {}).get("spread"), "wall_s": e.get("wall_s"),
         "vs_parent": parent_ms / ms if parent_ms and ms else None,
         "vs_seed": seed_ms / ms if seed_ms and ms and parent else None,
         "diagnosis": list(e.get("diagnosis") or ()), "attempts": attempts}
    if parent is not None:
        d["diff"] = source_diff(store.source(parent.source_hash), src, f"node {parent.id}", f"node {n.id}")
        if (n.flags or {}) != (parent.flags or {}):
            d["parent_flags"] = " ".join((parent.flags or {}).get("extra") or ())
    res = resources(e) if e else {}
    d["resources"] = _resource_rows(res, resources(pe) if parent and pe else None) if res else []
    if parent is not None:
        d["metrics"] = metric_table(pe.get("metrics"), e.get("metrics"))
    else:
        d["metrics"] = [f"  {label(k)} = {fmt_value(k, v)}" for k, v in sorted((e.get("metrics") or {}).items())
                        if isinstance(v, (int, float)) and not isinstance(v, bool)]
    d["metric_count"] = len(e.get("metrics") or {})
    if e and status != OK:
        d["verify_facts"] = _verify_facts(e)
        if category(status) is Category.BUILD_FAILURE:
            d["build_log"] = _clip(e.get("build_log"))
    sanitize = (e.get("result") or {}).get("sanitize")
    if sanitize:
        d["sanitize"] = format_sanitize(sanitize)
    if n.proposal_id is not None and n.proposal_id in exchanges:
        p = exchanges[n.proposal_id]
        used_exchanges.setdefault(n.proposal_id, {
            "id": p["id"], "proposer": p["proposer"], "model": p["model"], "prompt": _clip(p["prompt"], 60000),
            "answer": _clip(p["raw_answer"], 60000), "tokens_in": p["tokens_in"], "tokens_out": p["tokens_out"],
            "latency_s": p["latency_s"], "error": p["error"]})
        d["exchange"] = n.proposal_id
    return d


def _summary(store, run, nodes, evals, root, seed_ms, best_id, path, proposals, exchanges) -> dict:
    final = run.get("result") or {}
    best_e = evals.get(best_id) if best_id is not None else None
    best_ms = _ok_ms(best_e)
    statuses = Counter(e["status"] if (e := evals[n.id]) else n.status for n in nodes)
    ends = [run["updated_at"]] + [e["created_at"] for e in evals.values() if e]
    config = run.get("config") or {}
    proposers = Counter(n.proposer or "-" for n in nodes if n.parent_id is not None)
    models = sorted({p["model"] for p in exchanges.values() if p["model"]} |
                    ({config["llm_model"]} if config.get("llm_model") else set()))
    final_ok = final.get("status") == "ok" and isinstance(final.get("speedup"), (int, float))
    out = {
        "run": run["id"], "task": run["task"], "status": run["status"], "device": run.get("device") or "",
        "seed": run.get("seed"), "budget": run.get("budget"), "started": run["created_at"],
        "candidates": len(nodes), "evaluated": sum(1 for n in nodes if evals[n.id] and n.parent_id is not None),
        "seed_ms": seed_ms, "best_ms": best_ms, "best_node": best_id,
        "best_speedup": seed_ms / best_ms if seed_ms and best_ms else None,
        "best_path": [store.node(i).edit or "" for i in path[1:]],
        "statuses": sorted(statuses.items(), key=lambda kv: (-kv[1], kv[0])),
        "wall_s": _seconds(run["created_at"], max(t for t in ends if t)),
        "eval_s": sum(e.get("wall_s") or 0.0 for e in evals.values() if e) or None,
        "proposers": sorted(proposers.items(), key=lambda kv: (-kv[1], kv[0])), "models": models,
        "exchanges": len(exchanges), "nvcc": run.get("nvcc_version") or "",
        "final": None,
    }
    if final_ok:
        out["final"] = {"speedup": final["speedup"], "low": final.get("speedup_low"), "high": final.get("speedup_high"),
                        "rounds": final.get("speedup_rounds"), "seed_ms": final.get("seed_ms"),
                        "best_ms": final.get("best_ms"), "edits": list(final.get("best_edits") or []),
                        "message": final.get("message") or "",
                        "compared": len([c for c in final.get("compared") or () if c.get("median_ms")])}
    elif final:
        out["final_failed"] = f"{final.get('status')}: {final.get('message') or ''}".strip().rstrip(":")
    if final:
        out["sanitize"] = format_sanitize(final.get("sanitize"))
    if final.get("stopped"):
        out["stopped"] = final["stopped"]
    out.update(_limits(final))
    return out


def _failures(nodes, evals, status_of, proposals, attempts) -> dict:
    """Failed candidates grouped by status (most first), each with its first distinct messages and
    the nodes that gave them; and the proposals that never became candidates, by status."""
    groups: dict[str, dict] = {}
    for n in nodes:
        st = status_of(n)
        if st == OK:
            continue
        g = groups.setdefault(st, {"status": st, "category": str(category(st)), "count": 0, "examples": {}})
        g["count"] += 1
        msg = (_message(evals[n.id]) or "(no message)").splitlines()[0][:300] if evals[n.id] else "(not evaluated yet)"
        ex = g["examples"]
        if msg in ex:
            ex[msg]["nodes"].append(n.id)
        elif len(ex) < MAX_EXAMPLES:
            ex[msg] = {"message": msg, "nodes": [n.id]}
    out = []
    for g in sorted(groups.values(), key=lambda g: (-g["count"], g["status"])):
        shown = sum(len(x["nodes"]) for x in g["examples"].values())
        out.append({**g, "examples": list(g["examples"].values()), "others": g["count"] - shown})
    unborn = Counter(a[1] for rows in attempts.values() for a in rows)
    return {"groups": out, "attempts": sorted(unborn.items(), key=lambda kv: (-kv[1], kv[0]))}
