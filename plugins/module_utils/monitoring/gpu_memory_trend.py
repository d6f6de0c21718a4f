# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Case 5 of the seed runbook, the VRAM leak, judged on a Prometheus range answer (no I/O).

``range_query(window, metric)`` is the PromQL to run over ``/api/v1/query_range``; ``parse_matrix(data)`` turns the
answer's ``matrix`` into series; ``leak_findings(series, ...)`` names the pods whose framebuffer use
(``DCGM_FI_DEV_FB_USED``, MiB, labelled by dcgm-exporter with pod/namespace/container when its Kubernetes mapping
is on) grows steadily: a least-squares slope above ``min_slope`` MiB/h, a share of rising steps (among those that change) of at least
``min_monotonic`` and a growth (last minus first) of at least ``min_growth`` MiB.
"""

from __future__ import annotations

import math

METRIC = "DCGM_FI_DEV_FB_USED"
POD_LABELS = ("namespace", "pod", "container")
# The per-container limits the runbook names, by how the GPU is shared.
LIMIT_OPTIONS = {
    "mps": ("CUDA MPS: cap the client's device memory with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT "
            "(for example \"0=8G\") in the container's environment; with the GPU Operator's MPS sharing "
            "(sharing.mps in the device plugin config) each replica gets an equal share of the memory"),
    "time-slicing": ("time-slicing gives no memory isolation: move the pod to MIG (a nvidia.com/mig-* resource "
                     "bounds its memory) or to MPS sharing with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
    "mig": "the MIG instance bounds the pod's memory: the leak stays inside its slice; restart the pod",
    "exclusive": ("a whole GPU has no per-container memory limit: restart the pod on a schedule, or run it under "
                  "MPS with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, or on a MIG slice"),
}


class TrendInputError(ValueError):
    """An option or an answer the judgement cannot use."""


def range_query(metric=METRIC, selector=""):
    """The PromQL for the per-container framebuffer use: the series that carry a pod label."""
    matchers = 'pod!=""' + ("," + selector if selector else "")
    return "max by (namespace, pod, container, Hostname, gpu, GPU_I_PROFILE) (%s{%s})" % (metric, matchers)


def parse_matrix(data):
    """``[{labels, points: [(t, v), ...]}]`` from a query_range answer's ``data``; NaN samples are dropped."""
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise TrendInputError("the answer is not a range vector (resultType %r)" % (
            data.get("resultType") if isinstance(data, dict) else None))
    series = []
    for item in data["result"]:
        points = []
        for t, v in item.get("values") or []:
            try:
                value = float(v)
            except (TypeError, ValueError):
                continue
            if not math.isnan(value) and not math.isinf(value):
                points.append((float(t), value))
        series.append({"labels": dict(item.get("metric") or {}), "points": points})
    return series


def slope_per_hour(points):
    """Least-squares slope of ``points`` in units per hour (0 for fewer than two distinct times)."""
    n = len(points)
    if n < 2:
        return 0.0
    mean_t = sum(point[0] for point in points) / n
    mean_v = sum(point[1] for point in points) / n
    var = sum((point[0] - mean_t) ** 2 for point in points)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 3600.0


def monotonic_share(points):
    """Share of the steps between consecutive samples that go up, among those that change (a flat step - the same
    scrape read twice, a plateau between allocations - says nothing either way): 1.0 for a series that never
    falls, 0.0 for one that never changes."""
    steps = [b[1] - a[1] for a, b in zip(points, points[1:]) if b[1] != a[1]]
    if not steps:
        return 0.0
    return sum(1 for step in steps if step > 0) / float(len(steps))


def sharing_of(labels, sharing):
    """How the pod's GPU is shared: ``sharing`` maps a node (Hostname) to mps / time-slicing / mig / exclusive;
    a MIG profile label (GPU_I_PROFILE) means mig."""
    if labels.get("GPU_I_PROFILE"):
        return "mig"
    return (sharing or {}).get(labels.get("Hostname"), "exclusive")


def leak_findings(series, min_slope=100.0, min_monotonic=0.8, min_growth=1024.0, min_points=6, sharing=None):
    """The pods whose GPU memory grows steadily, steepest first. ``min_slope`` in MiB/h, ``min_growth`` in MiB."""
    if not 0 <= min_monotonic <= 1:
        raise TrendInputError("min_monotonic must be between 0 and 1, not %r" % min_monotonic)
    findings = []
    for item in series:
        labels, points = item["labels"], sorted(item["points"])
        if not labels.get("pod") or len(points) < min_points:
            continue
        slope = slope_per_hour(points)
        share = monotonic_share(points)
        growth = points[-1][1] - points[0][1]
        if slope < min_slope or share < min_monotonic or growth < min_growth:
            continue
        kind = sharing_of(labels, sharing)
        hours = (points[-1][0] - points[0][0]) / 3600.0
        findings.append({
            "namespace": labels.get("namespace"),
            "pod": labels.get("pod"),
            "container": labels.get("container"),
            "node": labels.get("Hostname"),
            "gpu": labels.get("gpu"),
            "case": 5,
            "severity": "warning",
            "slope_mib_per_hour": round(slope, 1),
            "monotonic_share": round(share, 3),
            "growth_mib": round(growth, 1),
            "first_mib": points[0][1],
            "last_mib": points[-1][1],
            "points": len(points),
            "hours": round(hours, 2),
            "sharing": kind,
            "message": "pod %s/%s container %s: GPU memory grew %.0f MiB in %.1f h (%.0f MiB/h, %.0f%% of steps "
                       "up or flat): a VRAM leak" % (labels.get("namespace"), labels.get("pod"),
                                                     labels.get("container"), growth, hours, slope, share * 100),
            "remedy": LIMIT_OPTIONS[kind],
        })
    return sorted(findings, key=lambda f: -f["slope_mib_per_hour"])
