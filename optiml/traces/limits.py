"""How far from the limit, in words, from a run's stored final figure (no GPU, no peaks here):
``final["speed_of_light"]`` (:meth:`optiml.profiler.calibration.SpeedOfLight.to_dict`, written by
``optimize``) and ``final["baseline"]`` (the spec's [baseline], timed: label, median_ms, status).
The final line of ``optimize``, ``optiml show``, ``optiml runs`` and the export say them alike."""
from __future__ import annotations


def sol_text(final: dict | None) -> str | None:
    """``45.2% of speed of light (memory-bound: DRAM copy bandwidth 3000 GB/s, measured peaks)``."""
    sol = (final or {}).get("speed_of_light")
    if not sol or not sol.get("fraction"):
        return None
    unit = sol.get("peak_unit") or ""
    peak = sol.get("peak") or 0.0
    rate = f"{peak / 1000:.4g} TFLOP/s" if unit == "GFLOP/s" else f"{peak:.0f} {unit}"
    return (f"{sol['fraction']:.1%} of speed of light ({sol.get('bound')}-bound: {sol.get('peak_name')} {rate}, "
            f"{sol.get('source')} peaks)")


def baseline_ratio(final: dict | None) -> float | None:
    """The baseline's median over the best's: above 1, the best kernel is faster than the library."""
    final = final or {}
    base = final.get("baseline") or {}
    if base.get("status") == "ok" and base.get("median_ms") and final.get("best_ms"):
        return base["median_ms"] / final["best_ms"]
    return None


def baseline_text(final: dict | None) -> str | None:
    """``1.08x over the baseline torch.matmul (0.4100 ms)`` (``3.10x slower than the baseline ... (...
    ms; 32% of its speed)`` when the library is faster: the vendor ratio), or why the baseline has no
    figure."""
    base = (final or {}).get("baseline")
    if not base:
        return None
    ratio = baseline_ratio(final)
    if ratio is None:
        return f"baseline {base.get('label')}: {base.get('status')} ({base.get('message') or 'no time'})"
    if ratio < 1:                    # the library is faster: say so plainly, and how much of its speed this is
        return (f"{1 / ratio:.2f}x slower than the baseline {base.get('label')} ({base['median_ms']:.4f} ms; "
                f"{ratio:.0%} of its speed)")
    return f"{ratio:.2f}x over the baseline {base.get('label')} ({base['median_ms']:.4f} ms)"


def short_limit(final: dict | None) -> str:
    """The ``optiml runs`` cell: ``45% memory (measured)``, ``-`` without a figure."""
    sol = (final or {}).get("speed_of_light")
    if not sol or not sol.get("fraction"):
        return "-"
    return f"{sol['fraction']:.0%} {sol.get('bound')} ({sol.get('source')})"


def short_baseline(final: dict | None) -> str:
    ratio = baseline_ratio(final)
    return f"{ratio:.2f}x" if ratio is not None else "-"
