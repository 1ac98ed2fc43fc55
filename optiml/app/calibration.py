"""This GPU's measured peaks (``optiml calibrate``'s figures), measured when the cache has none for
its model, driver and clocks setting: what ``optiml calibrate`` and ``optimize`` share."""
from __future__ import annotations

import datetime


def calibration(arch: str, force: bool = False):
    """(the Calibration of this machine's GPU, True when it was measured now). Measures with the
    calibration microbenchmarks (:func:`optiml.verify.calibrate.measure`) when ``force`` or when the
    cache has none for the GPU's model, driver and clocks setting, and saves it."""
    from ..profiler.calibration import current_key, lookup

    key = current_key()
    cal = None if force or key is None else lookup(*key)
    if cal is not None:
        return cal, False
    return measure_and_save(arch, key), True


def measure_and_save(arch: str, key: tuple[str, str, str] | None):
    """Measure this GPU now and cache the figures under ``key`` (the GPU's name, driver and clocks
    setting, from :func:`optiml.profiler.calibration.current_key`; None: what the measurement says)."""
    from ..profiler.calibration import Calibration, save
    from ..verify.calibrate import measure

    got = measure(arch)
    name, driver, clocks = key if key is not None else (got["gpu"], "unknown", "clocks unknown")
    cal = Calibration.from_dict({"gpu": name, "driver": driver, "clocks": clocks, "figures": got["figures"],
                                 "measured_at": datetime.datetime.now().isoformat(timespec="seconds"),
                                 "details": got.get("details") or {}}, "the calibration microbenchmarks")
    save([cal])
    return cal
