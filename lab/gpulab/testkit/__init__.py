"""Helpers that drive a running twin from outside, as an operator would: shared by the twin's tests (lab/tests)
and the benchmarks (benchmarks/). No other gpulab module imports them (hack/check_lab_imports.py)."""
