"""Measured speed of light: the calibration cache and the bound arithmetic.

``optiml calibrate`` measures a GPU's DRAM copy bandwidth, L2 bandwidth, FP32 FMA rate and
tensor-core rates (:mod:`optiml.verify.calibrate` runs the microbenchmarks); the figures are
kept here, in one JSON file under the optiml cache folder, keyed by the GPU's name, the driver
version and the clocks setting (a different driver or locked clocks measure differently).

:func:`peaks_for` is what every speed-of-light figure asks: the measured peaks of this GPU
when the cache has them (``source`` "measured"), else the datasheet's
(:func:`optiml.profiler.diagnosis.peaks_for_device`, ``source`` "datasheet"), else None.
:func:`speed_of_light` is the bound arithmetic: which bound applies (memory or compute) and the
fraction of it a time reaches. Nothing here needs a GPU.
"""
from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import UserError
from .diagnosis import DevicePeaks, peaks_for_device

CACHE_NAME = "calibration.json"
VERSION = 1

FIGURES = {
    "dram_gbps": "DRAM copy bandwidth (GB/s, bytes read + written)",
    "l2_gbps": "L2 read bandwidth (GB/s)",
    "fp32_gflops": "FP32 FMA throughput (GFLOP/s)",
    "fp16_tensor_gflops": "fp16 tensor-core throughput, fp32 accumulate: mma.sync, or wgmma where faster (Hopper) (GFLOP/s)",
    "bf16_tensor_gflops": "bf16 tensor-core throughput, fp32 accumulate: mma.sync, or wgmma where faster (Hopper) (GFLOP/s)",
    "tf32_tensor_gflops": "TF32 tensor-core throughput, mma.sync (GFLOP/s)",
}
REQUIRED = ("dram_gbps", "fp32_gflops")


class CalibrationError(UserError):
    """A calibration file that cannot be read or holds figures that make no sense."""


@dataclass(frozen=True)
class Calibration:
    """One GPU's measured figures (``figures``: keys of :data:`FIGURES`, None where not measured,
    e.g. tensor cores before sm_80) and what they were measured under."""

    gpu: str
    driver: str
    clocks: str
    figures: dict
    measured_at: str = ""
    details: dict = field(default_factory=dict)     # the memcpy check, buffer sizes, SM count, arch

    @property
    def key(self) -> str:
        return cache_key(self.gpu, self.driver, self.clocks)

    def peaks(self) -> DevicePeaks:
        f = self.figures
        return DevicePeaks(self.gpu, f["dram_gbps"], f["fp32_gflops"], "measured",
                           f.get("fp16_tensor_gflops"), f.get("bf16_tensor_gflops"), f.get("tf32_tensor_gflops"),
                           f.get("l2_gbps"))

    def to_dict(self) -> dict:
        return {"gpu": self.gpu, "driver": self.driver, "clocks": self.clocks, "figures": dict(self.figures),
                "measured_at": self.measured_at, "details": dict(self.details)}

    @classmethod
    def from_dict(cls, d, where: str) -> "Calibration":
        """A calibration from JSON; a one-sentence CalibrationError naming ``where`` when it is malformed."""
        if not isinstance(d, dict):
            raise CalibrationError(f"{where}: a calibration must be a JSON object, not {type(d).__name__}.")
        for k in ("gpu", "driver", "clocks"):
            if not isinstance(d.get(k), str) or not d[k].strip():
                raise CalibrationError(f"{where}: {k!r} is missing or not a non-empty string.")
        figs = d.get("figures")
        if not isinstance(figs, dict):
            raise CalibrationError(f"{where}: 'figures' is missing or not an object.")
        unknown = sorted(set(figs) - set(FIGURES))
        if unknown:
            raise CalibrationError(f"{where}: unknown figure {unknown[0]!r} (known: {', '.join(FIGURES)}).")
        for k in FIGURES:
            v = figs.get(k)
            if v is None and k not in REQUIRED:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise CalibrationError(f"{where}: figures.{k} must be a positive number, not {v!r}.")
        return cls(d["gpu"].strip(), d["driver"].strip(), d["clocks"].strip(),
                   {k: (float(figs[k]) if figs.get(k) is not None else None) for k in FIGURES},
                   str(d.get("measured_at") or ""), dict(d.get("details") or {}))


def cache_key(gpu: str, driver: str, clocks: str) -> str:
    return f"{gpu} | driver {driver} | {clocks}"


def cache_file() -> Path:
    """``$OPTIML_CACHE_DIR/calibration.json`` when set (the build cache's folder), else
    ``$XDG_CACHE_HOME/optiml/calibration.json`` (``~/.cache`` without XDG_CACHE_HOME)."""
    env = os.environ.get("OPTIML_CACHE_DIR")
    if env:
        return Path(env) / CACHE_NAME
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "optiml" / CACHE_NAME


def read_cache(path: Path | None = None) -> dict[str, Calibration]:
    """Every stored calibration by key ({} when there is no file)."""
    path = path or cache_file()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise CalibrationError(f"{path}: cannot read the calibration cache ({e.strerror}).") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CalibrationError(f"{path}: the calibration cache is not JSON ({e.msg} at line {e.lineno}); "
                               f"delete it and run optiml calibrate again.") from None
    entries = data.get("calibrations") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise CalibrationError(f"{path}: the calibration cache has no 'calibrations' list; delete it and run "
                               f"optiml calibrate again.")
    cals = [Calibration.from_dict(e, f"{path}: calibrations[{i}]") for i, e in enumerate(entries)]
    return {c.key: c for c in cals}


_WRITE = threading.Lock()


def save(cals: list[Calibration], path: Path | None = None) -> Path:
    """Add (or replace, by key) ``cals`` in the cache file, written whole and renamed into place."""
    path = path or cache_file()
    with _WRITE:
        known = read_cache(path)
        known.update({c.key: c for c in cals})
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"version": VERSION, "calibrations": [c.to_dict() for c in known.values()]},
                                      indent=1) + "\n")
            tmp.replace(path)
        except OSError as e:
            raise CalibrationError(f"{path}: cannot write the calibration cache ({e.strerror}); "
                                   f"set OPTIML_CACHE_DIR to a writable folder.") from None
    _cached_peaks.cache_clear()
    return path


def import_file(source: Path, path: Path | None = None) -> list[Calibration]:
    """Load figures measured elsewhere (a calibration cache file, one calibration object, or a list
    of them) into the cache; returns what was imported."""
    try:
        data = json.loads(Path(source).read_text())
    except OSError as e:
        raise CalibrationError(f"--import {source}: cannot read it ({e.strerror}).") from None
    except json.JSONDecodeError as e:
        raise CalibrationError(f"--import {source}: not JSON ({e.msg} at line {e.lineno}).") from None
    if isinstance(data, dict) and "calibrations" in data:
        data = data["calibrations"]
    items = data if isinstance(data, list) else [data]
    if not items:
        raise CalibrationError(f"--import {source}: it holds no calibration.")
    cals = [Calibration.from_dict(d, f"--import {source}" + (f": [{i}]" if isinstance(data, list) else ""))
            for i, d in enumerate(items)]
    save(cals, path)
    return cals


def clocks_setting() -> str:
    """The GPU 0's clocks setting as nvidia-smi says it: application clocks (graphics and memory),
    "clocks unknown" when it does not answer."""
    from ..gpus import smi

    out = smi("--query-gpu=clocks.applications.graphics,clocks.applications.memory",
              "--format=csv,noheader,nounits", "-i", "0").strip()
    parts = [p.strip() for p in out.split(",")]
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        return f"application clocks {parts[0]}/{parts[1]} MHz"
    return "clocks unknown"


def current_key() -> tuple[str, str, str] | None:
    """(GPU name, driver, clocks setting) of GPU 0, None without nvidia-smi's answer."""
    from ..gpus import gpu_facts

    name, driver = gpu_facts()
    if not name or not driver:
        return None
    return name, driver, clocks_setting()


def lookup(gpu: str, driver: str, clocks: str, path: Path | None = None) -> Calibration | None:
    return read_cache(path).get(cache_key(gpu, driver, clocks))


def peaks_for(device_name: str, key: tuple[str, str, str] | None = None, path: Path | None = None) -> DevicePeaks | None:
    """The peaks every speed-of-light figure uses: this GPU's calibration when the cache has one for
    ``key`` ((GPU, driver, clocks); the current GPU 0's when not given and its name is
    ``device_name``), else the datasheet's, else None. An unreadable cache counts as no calibration."""
    if key is None:
        return _cached_peaks(device_name or "", path)
    try:
        cal = lookup(*key, path=path)
    except CalibrationError:
        cal = None
    return cal.peaks() if cal is not None else peaks_for_device(device_name or "")


@lru_cache(maxsize=8)
def _cached_peaks(device_name: str, path: Path | None) -> DevicePeaks | None:
    """Once per process and device (the judge asks for every candidate); :func:`save` forgets it."""
    key = current_key()
    if key is not None and device_name and key[0] != device_name:
        key = None
    return peaks_for(device_name, key, path) if key is not None else peaks_for_device(device_name)


def forget() -> None:
    """Ask the cache and nvidia-smi again at the next :func:`peaks_for`."""
    _cached_peaks.cache_clear()


# --------------------------------------------------------------------------- the bound arithmetic

MATMUL_INTENSITY = 16.0
"""FLOPs per byte above which a half-precision task is held to the tensor-core rate."""


@dataclass(frozen=True)
class SpeedOfLight:
    """How close a time is to the least the task's counts allow on a GPU."""

    fraction: float             # least time / time (1.0: at the bound)
    bound: str                  # "memory" or "compute": the larger of the two least times
    bound_ms: float             # the least time
    peak: float                 # the bound's rate (GB/s or GFLOP/s)
    peak_name: str              # e.g. "DRAM copy bandwidth", "dense fp16 tensor-core peak"
    source: str                 # "measured" or "datasheet"
    device: str

    def to_dict(self) -> dict:
        return {"fraction": round(self.fraction, 6), "bound": self.bound, "bound_ms": self.bound_ms,
                "peak": self.peak, "peak_unit": "GB/s" if self.bound == "memory" else "GFLOP/s",
                "peak_name": self.peak_name, "source": self.source, "device": self.device}


def speed_of_light(time_ms: float, flops: float | None, nbytes: float | None, peaks: DevicePeaks | None,
                   dtype: str | None = None) -> SpeedOfLight | None:
    """The fraction of the speed of light ``time_ms`` reaches: the least time is the larger of
    ``flops`` at the compute peak for ``dtype`` (the tensor-core rate for a half-precision task of
    more than :data:`MATMUL_INTENSITY` FLOPs per byte, else FP32 FMA) and ``nbytes`` at the DRAM
    bandwidth; None without peaks, a positive time or any count."""
    if peaks is None or not time_ms or time_ms <= 0 or not (flops or nbytes):
        return None
    matmul_like = bool(flops and nbytes and flops / nbytes > MATMUL_INTENSITY)
    gflops, kind = peaks.compute_peak(dtype, matmul_like)
    compute_ms = (flops or 0.0) / (gflops * 1e9) * 1e3
    memory_ms = (nbytes or 0.0) / (peaks.dram_gbps * 1e9) * 1e3
    if memory_ms >= compute_ms:
        name = "DRAM copy bandwidth" if peaks.source == "measured" else "DRAM peak bandwidth"
        bound, least, peak = "memory", memory_ms, peaks.dram_gbps
    else:
        name, bound, least, peak = f"{kind} peak", "compute", compute_ms, gflops
    return SpeedOfLight(least / time_ms, bound, least, peak, name, peaks.source, peaks.name)


def physical_bound_ms(flops: float | None, nbytes: float | None, peaks: DevicePeaks | None) -> float | None:
    """The least time any correct kernel can take: FLOPs at the most generous compute rate known
    (any tensor core), bytes at the DRAM bandwidth; None without peaks or counts. A time under it
    is suspicious (the judge verifies such a candidate again on new inputs)."""
    if peaks is None:
        return None
    bound_s = max((flops or 0.0) / (peaks.fastest_gflops() * 1e9), (nbytes or 0.0) / (peaks.dram_gbps * 1e9))
    return bound_s * 1e3 if bound_s > 0 else None


# --------------------------------------------------------------------------- text

_LINES = (("dram_gbps", "DRAM copy bandwidth", "GB/s", 1.0), ("l2_gbps", "L2 read bandwidth", "GB/s", 1.0),
          ("fp32_gflops", "FP32 FMA", "TFLOP/s", 1e-3), ("fp16_tensor_gflops", "fp16 tensor (mma.sync or wgmma)", "TFLOP/s", 1e-3),
          ("bf16_tensor_gflops", "bf16 tensor (mma.sync or wgmma)", "TFLOP/s", 1e-3),
          ("tf32_tensor_gflops", "TF32 tensor (mma.sync)", "TFLOP/s", 1e-3))


def format_calibration(cal: Calibration) -> str:
    """A calibration as ``optiml calibrate`` prints it: its key, then one figure a line, with the
    plain memcpy's bandwidth beside the copy's and the datasheet's figures when known."""
    when = f"  (measured {cal.measured_at})" if cal.measured_at else ""
    lines = [f"{cal.key}{when}"]
    sheet = peaks_for_device(cal.gpu)
    sheet_of = {"dram_gbps": sheet.dram_gbps, "fp32_gflops": sheet.fp32_gflops,
                "fp16_tensor_gflops": sheet.fp16_tensor_gflops, "bf16_tensor_gflops": sheet.bf16_tensor_gflops,
                "tf32_tensor_gflops": sheet.tf32_tensor_gflops} if sheet else {}
    for key, name, unit, scale in _LINES:
        v = cal.figures.get(key)
        text = f"{v * scale:.4g} {unit}" if v is not None else "not measured"
        notes = []
        if key == "dram_gbps" and cal.details.get("memcpy_gbps"):
            notes.append(f"device-to-device memcpy: {cal.details['memcpy_gbps']:.4g} GB/s")
        if v is not None and sheet_of.get(key):
            notes.append(f"{v / sheet_of[key]:.0%} of the {sheet.name} datasheet's {sheet_of[key] * scale:.4g} {unit}")
        lines.append(f"  {name:<24}{text}" + (f"  ({'; '.join(notes)})" if notes else ""))
    return "\n".join(lines) + "\n"
