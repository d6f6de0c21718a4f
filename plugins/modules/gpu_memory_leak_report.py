#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_memory_leak_report
short_description: Name the pods whose GPU memory grows steadily (a VRAM leak), from DCGM in Prometheus
version_added: 0.1.0
description:
  - Reads C(DCGM_FI_DEV_FB_USED) (framebuffer used, MiB) per pod, namespace and container - the labels
    dcgm-exporter adds when its Kubernetes pod mapping is on - over O(window) from Prometheus' C(/api/v1/query_range)
    with one sample every O(step), and names each container whose use grows steadily - the seed runbook's case 5.
  - "A series is a leak when all three hold: its least-squares slope is at least O(min_slope_mib_per_hour), at
    least O(min_monotonic_share) of the steps between samples that change go up (an allocator cache that grows
    and is freed again fails this), and the last sample is at least O(min_growth_mib) above the first."
  - Each finding carries the per-container limit option that fits how the GPU is shared (O(sharing)) - CUDA MPS'
    C(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), a MIG slice, or none for time-slicing, which isolates no memory.
  - Reads only; fails closed on an unreachable Prometheus or an answer that is not a range vector.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.monitoring_http
attributes:
  check_mode:
    support: full
    details: Reads and judges as usual (it changes nothing).
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  window:
    description: How far back to look, in seconds.
    type: int
    default: 14400
  step:
    description: Seconds between the samples asked for.
    type: int
    default: 300
  selector:
    description:
      - Extra PromQL label matchers for the series, for example V(namespace=~"ml|serving").
    type: str
    default: ""
  min_slope_mib_per_hour:
    description: The least-squares slope (MiB per hour) from which growth counts.
    type: float
    default: 100
  min_monotonic_share:
    description: The share (0 to 1) of the steps between samples that change which must go up.
    type: float
    default: 0.8
  min_growth_mib:
    description: How many MiB the last sample must be above the first.
    type: float
    default: 1024
  min_points:
    description: Series with fewer samples in the window are not judged.
    type: int
    default: 6
  sharing:
    description:
      - How each node shares its GPUs, by node name (the C(Hostname) label), one of V(exclusive), V(mps),
        V(time-slicing), V(mig); unnamed nodes are V(exclusive). A series with a C(GPU_I_PROFILE) label is a MIG
        slice whatever this says.
    type: dict
    default: {}
notes:
  - dcgm-exporter labels C(DCGM_FI_DEV_FB_USED) with C(pod), C(namespace) and C(container) only when its
    Kubernetes mapping is enabled (the GPU Operator's default); without those labels no series is judged.
seealso:
  - module: gpuops.nvidia.prometheus_gate
  - module: gpuops.nvidia.gpu_workload_report
"""

EXAMPLES = r"""
- name: Pods leaking GPU memory over the last 6 hours
  gpuops.nvidia.gpu_memory_leak_report:
    url: http://prometheus.monitoring:9090
    window: 21600
    sharing:
      gpu-node-05: mps
  delegate_to: localhost
  run_once: true
  register: gpuops_leaks
"""

RETURN = r"""
leaks:
  description: The leaking containers, steepest first.
  returned: always
  type: list
  elements: dict
  sample: [{namespace: ml, pod: trainer-0, container: main, node: gpu-node-01, gpu: "0", case: 5,
            severity: warning, slope_mib_per_hour: 720.4, monotonic_share: 1.0, growth_mib: 2880.0,
            first_mib: 20000.0, last_mib: 22880.0, points: 49, hours: 4.0, sharing: mps,
            message: "pod ml/trainer-0 container main: GPU memory grew 2880 MiB in 4.0 h ...",
            remedy: "CUDA MPS: cap the client's device memory with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ..."}]
series:
  description: How many pod series Prometheus returned for the window.
  returned: always
  type: int
  sample: 12
query:
  description: The PromQL range query that was run.
  returned: always
  type: str
  sample: max by (namespace, pod, container, Hostname, gpu, GPU_I_PROFILE) (DCGM_FI_DEV_FB_USED{pod!=""})
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.gpu_memory_trend import (
    LIMIT_OPTIONS,
    TrendInputError,
    leak_findings,
    parse_matrix,
    range_query,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.http import (
    MONITORING_HTTP_MUTUALLY_EXCLUSIVE,
    MONITORING_HTTP_REQUIRED_BY,
    monitoring_http_argument_spec,
    monitoring_http_option_errors,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.prometheus import PrometheusAnswerError
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.prometheus_client import PrometheusClient


def main():
    module = AnsibleModule(
        argument_spec=dict(
            monitoring_http_argument_spec(),
            window=dict(type="int", default=14400),
            step=dict(type="int", default=300),
            selector=dict(type="str", default=""),
            min_slope_mib_per_hour=dict(type="float", default=100),
            min_monotonic_share=dict(type="float", default=0.8),
            min_growth_mib=dict(type="float", default=1024),
            min_points=dict(type="int", default=6),
            sharing=dict(type="dict", default={}),
        ),
        required_by=MONITORING_HTTP_REQUIRED_BY,
        mutually_exclusive=MONITORING_HTTP_MUTUALLY_EXCLUSIVE,
        supports_check_mode=True,
    )
    params = module.params
    errors = monitoring_http_option_errors(params)
    if params["window"] < 60:
        errors.append("window must be at least 60 seconds")
    if params["step"] < 1 or params["step"] > params["window"]:
        errors.append("step must be between 1 and window seconds")
    bad = sorted(node for node, kind in params["sharing"].items() if kind not in LIMIT_OPTIONS)
    if bad:
        errors.append("sharing: %s must be one of %s" % (", ".join(bad), ", ".join(sorted(LIMIT_OPTIONS))))
    if errors:
        module.fail_json(msg="; ".join(errors))
    query = range_query(selector=params["selector"])
    end = time.time()
    client = PrometheusClient.from_params(params)
    try:
        data = client.call("/api/v1/query_range", {"query": query, "start": "%.3f" % (end - params["window"]),
                                                   "end": "%.3f" % end, "step": str(params["step"])})[0]
        series = parse_matrix(data)
        leaks = leak_findings(series, min_slope=params["min_slope_mib_per_hour"],
                              min_monotonic=params["min_monotonic_share"], min_growth=params["min_growth_mib"],
                              min_points=params["min_points"], sharing=params["sharing"])
    except (PrometheusAnswerError, TrendInputError) as error:
        module.fail_json(msg="%s: %s" % (query, to_native(error)), query=query)
    module.exit_json(changed=False, leaks=leaks, series=len(series), query=query)


if __name__ == "__main__":
    main()
