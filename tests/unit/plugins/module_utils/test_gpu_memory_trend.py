# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# The range answer from tests/unit/fixtures/prometheus/query_matrix.json (captured from the Prometheus twin,
# PROVENANCE.md there); the memory curves are built here, with dcgm-exporter's label set, to pin the judgement.

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring import gpu_memory_trend as gt

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "prometheus")
T0 = 1796267298.0
STEP = 300.0  # 5 minutes


def labels(pod, **extra):
    base = {"namespace": "ml", "pod": pod, "container": "main", "Hostname": "gpu-node-01", "gpu": "0",
            "modelName": "NVIDIA H100 80GB HBM3"}
    base.update(extra)
    return base


def series(pod, values, **extra):
    return {"labels": labels(pod, **extra), "points": [(T0 + i * STEP, float(v)) for i, v in enumerate(values)]}


# 4 hours of samples every 5 minutes (49 points)
LEAK = [20000 + 60 * i + (15 if i % 5 == 0 else 0) for i in range(49)]           # ~720 MiB/h, small jitter
SAWTOOTH = [20000 + 400 * (i % 6) for i in range(49)]                          # allocator cache: up, then freed
FLAT = [30000 + (i % 2) * 8 for i in range(49)]
SLOW = [20000 + 2 * i for i in range(49)]                                      # 24 MiB/h, 96 MiB growth


def test_parse_matrix_on_a_real_range_answer():
    with open(os.path.join(FIXTURES, "query_matrix.json")) as stream:
        data = json.load(stream)["data"]
    parsed = gt.parse_matrix(data)
    assert len(parsed) == len(data["result"])
    assert parsed[0]["labels"]["Hostname"] == "gpu-node-01"
    assert parsed[0]["points"][0] == (1796267298.229, 41.0)


def test_parse_matrix_refuses_an_instant_vector_and_drops_nan():
    with pytest.raises(gt.TrendInputError):
        gt.parse_matrix({"resultType": "vector", "result": []})
    parsed = gt.parse_matrix({"resultType": "matrix", "result": [
        {"metric": {"pod": "p"}, "values": [[1, "NaN"], [2, "5"], [3, "+Inf"]]}]})
    assert parsed[0]["points"] == [(2.0, 5.0)]


def test_least_squares_slope_and_monotonic_share():
    line = [(T0 + 3600 * i, 100.0 + 50 * i) for i in range(5)]
    assert gt.slope_per_hour(line) == pytest.approx(50.0)
    assert gt.monotonic_share(line) == 1.0
    assert gt.monotonic_share([(0, 1), (1, 2), (2, 1), (3, 3)]) == pytest.approx(2 / 3.0)
    assert gt.slope_per_hour(line[:1]) == 0.0
    # flat steps (a scrape read twice, a plateau) are neither up nor down
    assert gt.monotonic_share([(0, 1), (1, 1), (2, 2), (3, 2), (4, 3)]) == 1.0
    assert gt.monotonic_share([(0, 5), (1, 5)]) == 0.0


def test_only_the_steady_leak_is_named():
    found = gt.leak_findings([series("leaker", LEAK), series("cache", SAWTOOTH), series("idle", FLAT),
                              series("slow", SLOW)])
    assert [f["pod"] for f in found] == ["leaker"]
    (leak,) = found
    assert 700 <= leak["slope_mib_per_hour"] <= 740
    assert leak["growth_mib"] == LEAK[-1] - LEAK[0]
    assert leak["monotonic_share"] >= 0.8 and leak["points"] == 49 and leak["hours"] == 4.0
    assert leak["case"] == 5 and leak["node"] == "gpu-node-01" and leak["container"] == "main"
    assert "VRAM leak" in leak["message"]


def test_thresholds_are_options():
    assert [f["pod"] for f in gt.leak_findings([series("slow", SLOW)], min_slope=10, min_growth=50)] == ["slow"]
    assert gt.leak_findings([series("leaker", LEAK)], min_growth=100000) == []
    assert gt.leak_findings([series("leaker", LEAK[:5])]) == []  # too few points to call it a trend
    with pytest.raises(gt.TrendInputError):
        gt.leak_findings([], min_monotonic=1.5)


def test_series_without_a_pod_label_are_not_pods():
    item = series("leaker", LEAK)
    del item["labels"]["pod"]
    assert gt.leak_findings([item]) == []


@pytest.mark.parametrize("extra, sharing, kind, needle", [
    ({}, {}, "exclusive", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
    ({}, {"gpu-node-01": "mps"}, "mps", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
    ({}, {"gpu-node-01": "time-slicing"}, "time-slicing", "no memory isolation"),
    ({"GPU_I_PROFILE": "1g.10gb", "GPU_I_ID": "7"}, {}, "mig", "MIG instance"),
])
def test_the_limit_option_follows_how_the_gpu_is_shared(extra, sharing, kind, needle):
    (leak,) = gt.leak_findings([series("leaker", LEAK, **extra)], sharing=sharing)
    assert leak["sharing"] == kind and needle in leak["remedy"]


def test_range_query_keeps_pod_series_only():
    assert gt.range_query() == ('max by (namespace, pod, container, Hostname, gpu, GPU_I_PROFILE) (DCGM_FI_DEV_FB_USED{pod!=""})')
    assert 'namespace="ml"' in gt.range_query(selector='namespace="ml"')
