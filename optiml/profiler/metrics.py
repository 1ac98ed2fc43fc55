"""The metric catalogue: plain keys, their units and the ncu metrics they come from.

Each :class:`MetricDef` names one quantity under a plain key (``duration_ns``,
``smem_ld_bank_conflicts``, ...) and lists the ncu raw-page column names it can be read from,
best first, plus the "Metric Name" the details page uses for it where it has one. The names
were taken from real H100 (gh100) output, the fixtures under tests/data/ncu.

Before profiling, :func:`filter_known` checks a metric list against ``ncu --query-metrics``
for the chip, since one unknown name makes ncu profile nothing. :func:`cached_query_metrics`
keeps that (slow, ~1 MB) text per ncu version and chip; what runs ncu is passed in.
"""
from __future__ import annotations

import gzip
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from loguru import logger


@dataclass(frozen=True)
class MetricDef:
    """One catalogue entry.

    ``ncu_names`` are raw-page column names that all mean this quantity (the first present
    is used); ``details_names`` the details page's "Metric Name"s for it. ``request`` is False
    for metrics ncu reports with every launch (launch statistics) and must not be asked for.
    """

    key: str
    unit: str
    description: str
    ncu_names: tuple[str, ...]
    details_names: tuple[str, ...] = ()
    request: bool = True


def _m(key, unit, description, ncu_names, details_names=(), request=True) -> MetricDef:
    if isinstance(ncu_names, str):
        ncu_names = (ncu_names,)
    if isinstance(details_names, str):
        details_names = (details_names,)
    return MetricDef(key, unit, description, tuple(ncu_names), tuple(details_names), request)


STALL_REASONS: tuple[str, ...] = (
    "barrier", "branch_resolving", "dispatch_stall", "drain", "gmma", "imc_miss",
    "lg_throttle", "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc",
    "no_instruction", "not_selected", "short_scoreboard", "sleeping", "tex_throttle", "wait",
)
"""Warp stall reasons with an ``smsp__average_warps_issue_stalled_*`` metric on gh100.

"selected" (the warp issued) is left out: it is not a stall.
"""


def stall_metric(reason: str) -> str:
    """The ncu metric for one stall reason: average warps stalled for it per issue cycle."""
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


_SASS = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"

CATALOGUE: tuple[MetricDef, ...] = (
    _m("duration_ns", "ns", "GPU time of the launch", "gpu__time_duration.sum", "Duration"),
    _m("achieved_occupancy_pct", "%", "active warps per cycle as % of the SM's maximum",
       "sm__warps_active.avg.pct_of_peak_sustained_active", "Achieved Occupancy"),
    _m("theoretical_occupancy_pct", "%", "most warps per SM the launch configuration allows, %",
       "sm__maximum_warps_per_active_cycle_pct", "Theoretical Occupancy", request=False),
    _m("occ_limit_registers", "block", "blocks per SM the register use allows",
       "launch__occupancy_limit_registers", "Block Limit Registers", request=False),
    _m("occ_limit_shared_mem", "block", "blocks per SM the shared memory use allows",
       "launch__occupancy_limit_shared_mem", "Block Limit Shared Mem", request=False),
    _m("occ_limit_warps", "block", "blocks per SM the warps per block allow",
       "launch__occupancy_limit_warps", "Block Limit Warps", request=False),
    _m("occ_limit_blocks", "block", "blocks per SM the SM's block slots allow",
       "launch__occupancy_limit_blocks", "Block Limit SM", request=False),
    _m("occ_limit_barriers", "block", "blocks per SM the barriers per block allow",
       "launch__occupancy_limit_barriers", "Block Limit Barriers", request=False),
    _m("smem_ld_bank_conflicts", "", "shared-memory bank conflicts of loads (LDS)",
       "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
    _m("smem_st_bank_conflicts", "", "shared-memory bank conflicts of stores (STS)",
       "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    _m("smem_ld_wavefronts", "", "shared-memory load wavefronts (conflicts included)",
       "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
    _m("smem_st_wavefronts", "", "shared-memory store wavefronts (conflicts included)",
       "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"),
    _m("tensor_pipe_active_pct", "%", "cycles any tensor pipe was active, % of peak",
       "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
    _m("hmma_pipe_active_pct", "%", "cycles the HMMA/HGMMA tensor pipe was active, % of peak",
       "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"),
    _m("hmma_inst", "inst", "warp instructions executed on the tensor pipe (HMMA)",
       "sm__inst_executed_pipe_tensor_op_hmma.sum"),
    _m("gmma_inst", "inst", "warpgroup instructions executed on the tensor pipe (GMMA, sm_90)",
       "sm__inst_executed_pipe_tensor_op_gmma.sum"),
    _m("dram_throughput_pct", "%", "DRAM throughput, % of peak",
       ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"), "DRAM Throughput"),
    _m("l2_throughput_pct", "%", "L2 cache throughput, % of peak",
       "lts__throughput.avg.pct_of_peak_sustained_elapsed", "L2 Cache Throughput"),
    _m("l1_throughput_pct", "%", "L1/TEX cache (and shared memory) throughput, % of peak",
       ("l1tex__throughput.avg.pct_of_peak_sustained_active",
        "l1tex__throughput.avg.pct_of_peak_sustained_elapsed"), "L1/TEX Cache Throughput"),
    _m("sm_throughput_pct", "%", "SM (compute) throughput, % of peak",
       "sm__throughput.avg.pct_of_peak_sustained_elapsed", "Compute (SM) Throughput"),
    _m("memory_throughput_pct", "%", "busiest memory unit (DRAM, L2, L1, shared), % of peak",
       "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "Memory Throughput"),
    _m("registers_per_thread", "register/thread", "registers each thread uses",
       "launch__registers_per_thread", "Registers Per Thread", request=False),
    _m("static_smem_per_block", "byte", "static shared memory per block",
       "launch__shared_mem_per_block_static", "Static Shared Memory Per Block", request=False),
    _m("dynamic_smem_per_block", "byte", "dynamic shared memory per block",
       "launch__shared_mem_per_block_dynamic", "Dynamic Shared Memory Per Block",
       request=False),
    _m("local_load_bytes", "byte", "local-memory bytes loaded (register spills, local arrays)",
       "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum"),
    _m("local_store_bytes", "byte", "local-memory bytes stored (register spills, local arrays)",
       "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum"),
    _m("l2_hit_rate_pct", "%", "L2 sector hit rate", "lts__t_sector_hit_rate.pct", "L2 Hit Rate"),
    _m("dram_bytes", "byte", "bytes read from and written to DRAM", "dram__bytes.sum"),
    _m("ffma_thread_inst", "inst", "FFMA thread instructions", _SASS.format("ffma")),
    _m("fadd_thread_inst", "inst", "FADD thread instructions", _SASS.format("fadd")),
    _m("fmul_thread_inst", "inst", "FMUL thread instructions", _SASS.format("fmul")),
    _m("hfma_thread_inst", "inst", "HFMA thread instructions", _SASS.format("hfma")),
    _m("hadd_thread_inst", "inst", "HADD thread instructions", _SASS.format("hadd")),
    _m("hmul_thread_inst", "inst", "HMUL thread instructions", _SASS.format("hmul")),
) + tuple(
    _m(f"stall_{reason}", "warp/issue", f"warps stalled on {reason} per issue cycle",
       stall_metric(reason))
    for reason in STALL_REASONS
)

DERIVED_KEYS: dict[str, str] = {
    "fp32_flops": "fp32 operations: FADD + FMUL + 2 x FFMA thread instructions",
    "fp16_flops": "fp16 operations: 2 x HADD + 2 x HMUL + 4 x HFMA (packed half2), as ncu's roofline",
    "smem_ld_conflict_ratio": "load bank conflicts / load wavefronts (0: none, near 1: many-way)",
    "smem_st_conflict_ratio": "store bank conflicts / store wavefronts",
    "occupancy_limiters": "comma-separated resources whose block limit is the smallest (text)",
    "top_stall_reasons": "comma-separated three largest warp stall reasons (text)",
}
"""Keys :func:`optiml.profiler.model.extract_metrics` adds beyond the catalogue."""


def catalogue_by_key() -> dict[str, MetricDef]:
    """The catalogue as a dict by plain key."""
    return {m.key: m for m in CATALOGUE}


def ncu_metric_names(keys: Iterable[str] | None = None) -> list[str]:
    """The names to pass to ``ncu --metrics`` (joined with commas) for ``keys`` (default all).

    Each entry contributes its first raw-page name; entries ncu reports with every launch
    (``request=False``) contribute nothing. Raises KeyError for a key not in the catalogue.
    """
    table = catalogue_by_key()
    chosen = [table[k] for k in keys] if keys is not None else list(CATALOGUE)
    return list(dict.fromkeys(m.ncu_names[0] for m in chosen if m.request))


# Prefixes of metrics ncu reports with every launch but does not list in --query-metrics
# (seen in fixtures collected with an explicit --metrics list).
ALWAYS_REPORTED_PREFIXES: tuple[str, ...] = (
    "launch__", "device__", "profiler__", "numa__", "nvlink__", "c2clink__",
    "sm__maximum_warps", "smsp__maximum_warps",
)


def base_name(metric: str) -> str:
    """A requested metric's base name: ``foo__bar.sum.pct_of_peak_sustained_elapsed`` → ``foo__bar``.

    A qualifier before the name stays ("SM_C.TriageCompute.smsp__x.avg" → "SM_C.TriageCompute.smsp__x").
    """
    start = metric.find("__")
    dot = metric.find(".", start if start >= 0 else 0)
    return metric[:dot] if dot >= 0 else metric


_QUERY_NAME = re.compile(r"^([A-Za-z0-9_.]*__[A-Za-z0-9_]+)\s")


def parse_query_metrics(text: str) -> frozenset[str]:
    """The metric base names in ``ncu --query-metrics`` output.

    Names start a line; wrapped descriptions continue on indented lines and are skipped.
    """
    return frozenset(m.group(1) for line in text.splitlines() if (m := _QUERY_NAME.match(line)))


def filter_known(
    metric_names: Iterable[str], query_metrics_text: str
) -> tuple[list[str], list[str]]:
    """Split ``metric_names`` into (kept, dropped) by the base names ncu knows for the chip.

    Names under :data:`ALWAYS_REPORTED_PREFIXES` are kept without a look-up. The order of
    ``metric_names`` is kept in both lists.
    """
    known = parse_query_metrics(query_metrics_text)
    kept, dropped = [], []
    for name in metric_names:
        plain = name.removeprefix("regex:")
        if plain.startswith(ALWAYS_REPORTED_PREFIXES) or base_name(plain) in known:
            kept.append(name)
        else:
            dropped.append(name)
    if dropped:
        logger.warning("ncu does not know {} requested metric(s): {}", len(dropped), ", ".join(dropped))
    return kept, dropped


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9.]+", "_", text.strip()).strip("_")
    return slug or "unknown"


def query_metrics_cache_path(cache_dir: Path, ncu_version: str, chip: str) -> Path:
    """Where :func:`cached_query_metrics` keeps the text for one ncu version and chip."""
    return Path(cache_dir) / f"ncu-query-metrics-{_slug(ncu_version)}-{_slug(chip.lower())}.txt.gz"


def cached_query_metrics(
    cache_dir: Path, ncu_version: str, chip: str, produce: Callable[[], str]
) -> str:
    """The ``ncu --query-metrics --chip CHIP`` text, from the cache or from ``produce()``.

    ``produce`` runs ncu (the caller supplies it); its text is stored gzip-compressed under
    ``cache_dir``, keyed by (ncu version, chip), written atomically. Empty text is not cached.
    """
    path = query_metrics_cache_path(cache_dir, ncu_version, chip)
    if path.exists():
        try:
            return gzip.decompress(path.read_bytes()).decode("utf-8")
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            logger.warning("ignoring unreadable query-metrics cache {}: {}", path, exc)
    text = produce()
    if not text.strip():
        return text
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(gzip.compress(text.encode("utf-8")))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    logger.debug("cached ncu --query-metrics for {} {} at {}", ncu_version, chip, path)
    return text
