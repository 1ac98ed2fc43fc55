"""Profiler: Nsight Compute driving, metric parsing and diagnosis.

The CPU side lives here and needs no GPU: :mod:`~optiml.profiler.metrics` (the metric
catalogue, the ``--metrics`` list and its check against ``ncu --query-metrics``),
:mod:`~optiml.profiler.ncu_csv` (parsing ncu's raw and details CSV pages, recognising ncu
failures), :mod:`~optiml.profiler.model` (plain-keyed metrics from one launch),
:mod:`~optiml.profiler.diagnosis` (sentences to act on) and :mod:`~optiml.profiler.types`
(``ProfileResult``: failure as data).
"""
from optiml.profiler.diagnosis import H100_SXM, H200, DevicePeaks, diagnose, peaks_for_device
from optiml.profiler.metrics import (
    CATALOGUE,
    MetricDef,
    cached_query_metrics,
    filter_known,
    ncu_metric_names,
)
from optiml.profiler.model import extract_metrics
from optiml.profiler.ncu_csv import (
    NcuLaunch,
    NcuReport,
    NvtxRange,
    classify_ncu_failure,
    detect_ncu_error,
    parse_details_csv,
    parse_raw_csv,
)
from optiml.profiler.types import ProfileResult, ProfileStatus

__all__ = [
    "CATALOGUE", "DevicePeaks", "H100_SXM", "H200", "MetricDef", "NcuLaunch", "NcuReport",
    "NvtxRange", "ProfileResult", "ProfileStatus", "cached_query_metrics",
    "classify_ncu_failure", "detect_ncu_error", "diagnose", "extract_metrics", "filter_known",
    "ncu_metric_names", "parse_details_csv", "parse_raw_csv", "peaks_for_device",
]
