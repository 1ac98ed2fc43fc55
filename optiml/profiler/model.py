"""From one parsed ncu launch to the catalogue's plain keys, plus derived values.

:func:`extract_metrics` reads each catalogue entry from the launch's raw-page columns (or its
details-page metric names), converts times to ns and sizes to bytes where ncu printed other
units, and adds the values of :data:`optiml.profiler.metrics.DERIVED_KEYS`.
"""
from __future__ import annotations

from loguru import logger

from optiml.profiler.metrics import CATALOGUE, STALL_REASONS, MetricDef
from optiml.profiler.ncu_csv import NcuLaunch
from optiml.profiler.types import MetricValue

_SCALE: dict[str, dict[str, float]] = {
    "ns": {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
           "s": 1e9, "second": 1e9},
    "byte": {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12},
}

OCCUPANCY_RESOURCES: dict[str, str] = {
    "registers": "occ_limit_registers",
    "shared_mem": "occ_limit_shared_mem",
    "warps": "occ_limit_warps",
    "blocks": "occ_limit_blocks",
    "barriers": "occ_limit_barriers",
}
"""Occupancy limiter names and the keys of their blocks-per-SM limits."""


def _convert(value: float, unit: str, definition: MetricDef, column: str) -> float:
    scales = _SCALE.get(definition.unit)
    unit = unit.removesuffix("/block")  # "byte/block" for per-block sizes
    if scales is None or not unit or unit == definition.unit:
        return value
    if unit not in scales:
        logger.warning("{} is in {!r}, not convertible to {}; kept as is", column, unit, definition.unit)
        return value
    return value * scales[unit] / scales[definition.unit]


def _lookup(launch: NcuLaunch, definition: MetricDef) -> float | None:
    for column in definition.ncu_names + definition.details_names:
        value = launch.values.get(column)
        if isinstance(value, float):
            return _convert(value, launch.units.get(column, ""), definition, column)
        if value is not None:
            logger.debug("{} holds {!r}, not a number", column, value)
    return None


def _thread_inst(launch: NcuLaunch, metrics: dict, op: str) -> float | None:
    """Thread instructions of one op: the .sum column, or per-cycle rate x elapsed cycles.

    The full set reports only ``...pred_on.sum.per_cycle_elapsed``; multiplied by
    ``smsp__cycles_elapsed.avg`` it gives the same count.
    """
    count = metrics.get(f"{op}_thread_inst")
    if count is not None:
        return count
    rate = launch.values.get(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed")
    cycles = launch.values.get("smsp__cycles_elapsed.avg")
    if isinstance(rate, float) and isinstance(cycles, float):
        return rate * cycles
    return None


def _weighted_sum(parts: list[tuple[float, float | None]]) -> float | None:
    present = [(w, v) for w, v in parts if v is not None]
    return sum(w * v for w, v in present) if present else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None:
        return None
    if denominator == 0:
        return 0.0 if numerator == 0 else None
    return numerator / denominator


def occupancy_limiters(metrics: dict[str, MetricValue]) -> list[str]:
    """The resources whose blocks-per-SM limit is the smallest (all of them on a tie)."""
    limits = {
        name: metrics.get(key) for name, key in OCCUPANCY_RESOURCES.items()
        if isinstance(metrics.get(key), float)
    }
    if not limits:
        return []
    least = min(limits.values())
    return [name for name, value in limits.items() if value == least]


def _stall_values(launch: NcuLaunch, metrics: dict) -> dict[str, float]:
    """Per-reason stall weights: the per-issue ratios, else warp latencies, else PC samples."""
    ratios = {r: metrics.get(f"stall_{r}") for r in STALL_REASONS}
    found = {r: v for r, v in ratios.items() if v is not None}
    if found:
        return found
    for template in ("smsp__average_warp_latency_issue_stalled_{}.ratio",
                     "smsp__pcsamp_warps_issue_stalled_{}"):
        found = {}
        for reason in STALL_REASONS:
            names = [reason] + (["no_instructions"] if reason == "no_instruction" else [])
            for name in names:
                value = launch.values.get(template.format(name))
                if isinstance(value, float):
                    found[reason] = value
        if found:
            return found
    return {}


def top_stall_reasons(stalls: dict[str, float], n: int = 3) -> list[tuple[str, float]]:
    """The ``n`` largest non-zero stall reasons, largest first."""
    ranked = sorted(((r, v) for r, v in stalls.items() if v > 0), key=lambda rv: -rv[1])
    return ranked[:n]


def extract_metrics(launch: NcuLaunch) -> dict[str, MetricValue]:
    """The catalogue's plain keys (None where absent) and the derived keys for one launch."""
    metrics: dict[str, MetricValue] = {m.key: _lookup(launch, m) for m in CATALOGUE}
    ops = {op: _thread_inst(launch, metrics, op) for op in ("ffma", "fadd", "fmul", "hfma", "hadd", "hmul")}
    metrics["fp32_flops"] = _weighted_sum([(2, ops["ffma"]), (1, ops["fadd"]), (1, ops["fmul"])])
    metrics["fp16_flops"] = _weighted_sum([(4, ops["hfma"]), (2, ops["hadd"]), (2, ops["hmul"])])
    metrics["smem_ld_conflict_ratio"] = _ratio(metrics["smem_ld_bank_conflicts"], metrics["smem_ld_wavefronts"])
    metrics["smem_st_conflict_ratio"] = _ratio(metrics["smem_st_bank_conflicts"], metrics["smem_st_wavefronts"])
    limiters = occupancy_limiters(metrics)
    metrics["occupancy_limiters"] = ",".join(limiters) if limiters else None
    stalls = _stall_values(launch, metrics)
    top = top_stall_reasons(stalls)
    metrics["top_stall_reasons"] = ",".join(r for r, _ in top) if top else None
    return metrics
