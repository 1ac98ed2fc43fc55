"""Profiler: Nsight Compute driving, metric parsing and diagnosis."""
