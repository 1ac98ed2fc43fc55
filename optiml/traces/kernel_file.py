"""A stored kernel as a file a user can build again: its source under a header comment that says
where it came from (run, node, edits), how fast it was against the seed, and the exact nvcc flags
it was verified and timed with (the spec's, the ones the search added, the architecture)."""
from __future__ import annotations

import tomllib
from datetime import datetime, timezone

from .. import __version__
from ..gpus import flags_name_arch

DEFAULT_SPEC_FLAGS = ("-O3",)


def spec_flags(spec_toml: str | None) -> tuple[str, ...]:
    """The spec's ``[kernel] nvcc_flags`` (the spec's default when it gives none)."""
    try:
        data = tomllib.loads(spec_toml or "")
    except tomllib.TOMLDecodeError:
        return DEFAULT_SPEC_FLAGS
    flags = (data.get("kernel") or {}).get("nvcc_flags")
    return tuple(flags) if isinstance(flags, list) and all(isinstance(f, str) for f in flags) else DEFAULT_SPEC_FLAGS


def node_flags(store, run: dict, node_id: int) -> list[str]:
    """The nvcc flags node ``node_id`` was built with: ``-arch``, the spec's, the search's extra ones."""
    node = store.node(node_id)
    e = store.evaluation(node_id) or {}
    arch = (e.get("build") or {}).get("arch")
    extra = list((node.flags or {}).get("extra") or ())
    if flags_name_arch(extra):
        arch = None              # the candidate names its own (a template for sm_90a, say): nvcc takes the last
    return ([f"-arch={arch}"] if arch else []) + list(spec_flags(run.get("spec_toml"))) + extra


def kernel_file(store, run_id: int, node_id: int, *, speedup: float | None = None, seed_ms: float | None = None,
                best_ms: float | None = None) -> str:
    """Node ``node_id``'s source with the header comment. ``speedup``/``seed_ms``/``best_ms``: the
    final interleaved figures when there are (else the search's own medians are said)."""
    run = store.run(run_id)
    source = store.source(store.node(node_id).source_hash)
    path = store.path_to(node_id)
    edits = [" ".join(n.edit.split()) for n in path[1:] if n.edit]
    if speedup is None:
        root = store.evaluation(path[0].id) or {}
        mine = store.evaluation(node_id) or {}
        seed_ms, best_ms = root.get("median_ms"), mine.get("median_ms")
        speedup = seed_ms / best_ms if seed_ms and best_ms else None
        how = "medians of the search"
    else:
        how = "timed interleaved with the seed"
    flags = node_flags(store, run, node_id)
    lines = [f"optiml: run {run_id}, node {node_id} ({run.get('task') or 'kernel'}), written by optiml {__version__} "
             f"on {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}"]
    if speedup:
        ms = f" ({seed_ms:.4g} ms -> {best_ms:.4g} ms, {how})" if seed_ms and best_ms else ""
        lines.append(f"speedup over the seed: {speedup:.2f}x{ms}")
    lines.append("edits from the seed: " + ("; ".join(edits) if edits else "none (this is the seed)"))
    lines.append("build it with the flags it was verified and timed with:")
    lines.append("  nvcc " + " ".join(flags) + " ...")
    header = "".join(f"// {ln}\n".replace("*/", "* /") for ln in lines)
    return header + source if source.startswith("\n") else header + "\n" + source

