#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_fleet_report
short_description: Judge whether the GPU ledger of a Kubernetes cluster matches reality, fleet-wide, in one pass
version_added: 0.1.0
description:
  - Reads the whole cluster with a constant number of list calls - nodes, pods of all namespaces, DaemonSets of all
    namespaces, and ResourceSlices where the API server serves C(resource.k8s.io) (after one discovery request) -
    never one call per node, and judges every GPU node (a node advertising C(nvidia.com/*) resources or
    labelled C(feature.node.kubernetes.io/pci-10de.present) / C(nvidia.com/gpu.present)).
  - "Checks: the ledger (capacity vs allocatable vs what NVML sees when O(node_facts) has the node: capacity 8,
    allocatable 0, NVML 8 is the stale ledger; allocatable 7 an unhealthy GPU; NVML 7 a GPU off the bus);
    device-plugin, GPU Feature Discovery and DCGM-exporter pods per GPU node (missing, crash-looping, restarting);
    GPU pods Pending longer than O(pending_threshold) with the scheduler's reason; pods that see GPUs without a
    limit; the driver version spread and the nodes off the target; MIG and time-slicing drift against what the
    device plugin advertises; nodes cordoned longer than O(cordon_threshold) and by whom; and from O(node_facts):
    Xid events not in the previous report, uncorrectable ECC, retired pages and remapped rows."
  - Each finding has a severity (critical, error, warning, info), the runbook's production case it matches and the
    fix; findings come worst first. O(report_dir) receives C(health-<UTC time>.json), C(health-<UTC time>.md) and
    C(latest.json) (the next check's baseline).
  - The report counts the API list calls it made (C(api.list_calls)).
  - Runs on the controller (C(delegate_to=localhost)) and uses the C(kubernetes) Python client.
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.k8s_auth
attributes:
  check_mode:
    support: full
    details: Reads and judges as usual; writes no report file.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  nodes:
    description:
      - Judge only these nodes (the fleet-wide parts, driver spread and pending pods, still see every node). A name
        that is not a GPU node of the cluster fails the task before anything is written.
    type: list
    elements: str
    default: []
  node_facts:
    description:
      - Per node name, the C(ansible_facts.nvidia_driver) that M(gpuops.nvidia.nvidia_driver_facts) gathered on it.
    type: dict
    default: {}
  previous_report:
    description:
      - The JSON report of the last check; its Xid events are the baseline (only newer ones are findings).
        Unset with O(report_dir) set, C(<report_dir>/latest.json) is used when it exists.
    type: path
  pending_threshold:
    description:
      - A GPU pod Pending longer than this is a finding. Minutes, or a number with C(m), C(h) or C(d).
    type: str
    default: 30m
  cordon_threshold:
    description:
      - A GPU node cordoned longer than this is a finding. Minutes, or a number with C(m), C(h) or C(d).
    type: str
    default: 24h
  target_driver_version:
    description:
      - The fleet's driver version. Unset, the most common version is the target.
    type: str
  look_at:
    description:
      - Which nodes RV(ssh_nodes) lists for a closer look over SSH. V(flagged) the nodes with a finding of warning
        or worse, plus O(sample) others; V(all) every GPU node; V(none) no node.
    type: str
    choices: [flagged, all, none]
    default: flagged
  sample:
    description:
      - With O(look_at=flagged), how many nodes without findings to add, chosen by a hash of the ISO week and the
        node name (the sample changes every week).
    type: int
    default: 0
  prometheus_url:
    description:
      - Prometheus to read the VRAM top 10 from (C(topk(10, DCGM_FI_DEV_FB_USED))). Unset, the VRAM top 10 comes from
        O(node_facts). An unreachable Prometheus fails the task.
    type: str
  prometheus_timeout:
    description: Seconds for the Prometheus query.
    type: int
    default: 10
  report_dir:
    description:
      - Where the JSON and Markdown reports are written (created when missing). Unset, nothing is written.
    type: path
notes:
  - The connection options and their C(K8S_AUTH_*) environment variables are those of kubernetes.core; set them
    once for every Kubernetes module of this collection with C(module_defaults) and C(group/gpuops.nvidia.k8s).
seealso:
  - module: gpuops.nvidia.nvidia_driver_facts
  - module: gpuops.nvidia.device_plugin_restart
  - name: The weekly health check runbook
    description: playbooks/health_check.yml, which runs this module twice around the SSH look at flagged nodes.
    link: https://github.com/gpuops/nvidia/blob/main/docs/health_check.md
"""

EXAMPLES = r"""
- name: Which GPU nodes need a closer look
  gpuops.nvidia.gpu_fleet_report:
    kubeconfig: ~/.kube/config
  delegate_to: localhost
  run_once: true
  register: gpuops_fleet

- name: The full report, with the facts of the nodes looked at, written under ./gpuops-reports
  gpuops.nvidia.gpu_fleet_report:
    node_facts: "{{ dict(groups['gpuops_looked_at'] | zip(groups['gpuops_looked_at'] | map('extract', hostvars)
                    | map(attribute='ansible_facts.nvidia_driver'))) }}"
    report_dir: ./gpuops-reports
    prometheus_url: http://prometheus.monitoring:9090
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
critical:
  description: Whether any finding is critical.
  returned: always
  type: bool
  sample: true
summary:
  description: Counts - GPU nodes, nodes and pods listed, findings per severity, components present, nodes looked at.
  returned: always
  type: dict
  sample: {gpu_nodes: 8, nodes_listed: 8, pods_listed: 12, critical: true,
           findings: {critical: 2, error: 1, warning: 0, info: 0}, components_present: [device-plugin],
           nodes_looked_at: [gpu-node-02]}
findings:
  description: Every finding, worst first.
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu-node-01, check: ledger, code: stale_ledger, severity: critical, case: 1,
            message: "gpu-node-01: nvidia.com/gpu capacity 8, allocatable 0, NVML 8: the stale ledger",
            remedy: restart the device-plugin pod on the node, runbook: "docs/alerts.md#gpuallocatablezero"}]
nodes:
  description: Per GPU node - worst severity (C(ok) without findings), finding codes, readiness, resources, driver.
  returned: always
  type: dict
ssh_nodes:
  description: The nodes to look at over SSH (see O(look_at)), flagged ones first, each part by name.
  returned: always
  type: list
  elements: str
  sample: [gpu-node-01, gpu-node-03]
driver_versions:
  description: Number of GPU nodes per driver version (from GPU Feature Discovery's labels; C(unknown) without).
  returned: always
  type: dict
  sample: {"550.54.15": 7, "535.161.08": 1}
vram_top:
  description: The 10 GPUs using the most memory.
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu-node-01, gpu: 0, used_mib: 70000, total_mib: 81559}]
api:
  description:
    - The API requests this report made - C(list_calls) (3, or 4 with ResourceSlices, whatever the fleet's size),
      C(lists), C(discovery_calls) (1), the seconds each list took (C(list_seconds)), reading everything took
      (C(read_seconds)) and reading and judging took (C(seconds)).
  returned: always
  type: dict
  sample: {list_calls: 3, lists: [nodes, pods, daemonsets], list_seconds: {nodes: 0.02, pods: 0.01, daemonsets: 0.01},
           discovery_calls: 1, read_seconds: 0.05, seconds: 0.42}
report_files:
  description: The files written (empty in check mode or without O(report_dir)).
  returned: always
  type: list
  elements: str
"""

import datetime
import json
import os
import time
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.fleet_health import (
    HealthInputError,
    is_gpu_node,
    judge,
    markdown,
    nodes_to_look_at,
    parse_duration_minutes,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.client import (
    K8S_AUTH_ARG_SPEC,
    api_client_from_module,
    api_error_message,
    list_call,
    resource_path,
    served_versions,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.watch import list_json
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.node_readiness import dra_api_version
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.prometheus import PrometheusAnswerError, parse_query_data
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.prometheus_client import PrometheusClient

try:
    import kubernetes
except ImportError:
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
    kubernetes = None
else:
    KUBERNETES_IMPORT_ERROR = None

VRAM_QUERY = "topk(10, DCGM_FI_DEV_FB_USED)"


def read_cluster(module, api):
    """Nodes, pods, DaemonSets and, where the API server serves resource.k8s.io, ResourceSlices: one discovery
    request and at most four list calls, whatever the number of nodes."""
    calls = [("nodes", list_call(api, resource_path("v1", "nodes"))),
             ("pods", list_call(api, resource_path("v1", "pods"))),
             ("daemonsets", list_call(api, resource_path("apps/v1", "daemonsets")))]
    try:
        served = served_versions(api, "resource.k8s.io")
    except Exception as error:  # ApiError, urllib3 connection and TLS errors
        module.fail_json(msg=api_error_message(error, "discover API groups"))
    version = dra_api_version(served)
    if version is not None:
        calls.append(("resourceslices", list_call(api, resource_path("resource.k8s.io/" + version, "resourceslices"))))
    found, lists = {"resourceslices": []}, {}
    for key, call in calls:
        started = time.time()
        try:
            found[key] = list_json(call)[0]
        except Exception as error:  # ApiException, urllib3 connection and TLS errors
            module.fail_json(msg=api_error_message(error, "list %s" % key))
        lists[key] = round(time.time() - started, 3)
    return found, lists


def read_vram(module):
    """VRAM rows from DCGM's DCGM_FI_DEV_FB_USED (MiB) in Prometheus; fails the task when it cannot be read."""
    client = PrometheusClient.at(module.params["prometheus_url"], timeout=module.params["prometheus_timeout"])
    try:
        data = client.call("/api/v1/query", {"query": VRAM_QUERY})[0]
        samples = parse_query_data(data)
    except PrometheusAnswerError as error:
        module.fail_json(msg="prometheus_url: %s" % to_native(error))
    rows = []
    for sample in samples:
        labels = sample["labels"]
        rows.append({"node": labels.get("Hostname") or labels.get("node") or labels.get("instance"),
                     "gpu": labels.get("gpu"), "uuid": labels.get("UUID"), "used_mib": sample["value"],
                     "total_mib": None})
    return rows


def load_previous(module, path):
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as stream:
            return json.load(stream)
    except (OSError, ValueError) as error:
        module.fail_json(msg="previous_report %s cannot be read: %s" % (path, to_native(error)))


def write_report(module, report, directory):
    stamp = report["generated_at"].replace(":", "").replace("-", "")
    try:
        os.makedirs(directory, exist_ok=True)
        paths = [os.path.join(directory, "health-%s.json" % stamp), os.path.join(directory, "health-%s.md" % stamp),
                 os.path.join(directory, "latest.json")]
        body = json.dumps(report, indent=1, sort_keys=True)
        for path, text in zip(paths, (body, markdown(report), body)):
            temporary = path + ".tmp"
            with open(temporary, "w") as stream:
                stream.write(text)
            os.replace(temporary, path)
    except OSError as error:
        module.fail_json(msg="report_dir %s: %s" % (directory, to_native(error)))
    return paths


def main():
    argument_spec = dict(
        K8S_AUTH_ARG_SPEC,
        nodes=dict(type="list", elements="str", default=[]),
        node_facts=dict(type="dict", default={}),
        previous_report=dict(type="path"),
        pending_threshold=dict(type="str", default="30m"),
        cordon_threshold=dict(type="str", default="24h"),
        target_driver_version=dict(type="str"),
        look_at=dict(type="str", choices=["flagged", "all", "none"], default="flagged"),
        sample=dict(type="int", default=0),
        prometheus_url=dict(type="str"),
        prometheus_timeout=dict(type="int", default=10),
        report_dir=dict(type="path"),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    try:
        pending_minutes = parse_duration_minutes(params["pending_threshold"], "pending_threshold")
        cordon_minutes = parse_duration_minutes(params["cordon_threshold"], "cordon_threshold")
    except HealthInputError as error:
        module.fail_json(msg=str(error))
    if params["sample"] < 0:
        module.fail_json(msg="sample: %d must not be negative" % params["sample"])
    if params["prometheus_timeout"] < 1:
        module.fail_json(msg="prometheus_timeout must be at least 1 second")
    if kubernetes is None:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    api = api_client_from_module(module)
    vram_rows = read_vram(module) if params["prometheus_url"] else None
    previous_path = params["previous_report"] or (
        os.path.join(params["report_dir"], "latest.json") if params["report_dir"] else None)
    previous = load_previous(module, previous_path)

    started = time.time()
    cluster, lists = read_cluster(module, api)
    nodes = cluster["nodes"]
    if params["nodes"]:
        gpu_names = set(node["metadata"]["name"] for node in nodes if is_gpu_node(node))
        unknown = sorted(set(params["nodes"]) - gpu_names)
        if unknown:
            module.fail_json(msg="nodes: %s %s not a GPU node of the cluster (%d GPU nodes listed)" % (
                ", ".join(unknown), "is" if len(unknown) == 1 else "are", len(gpu_names)))
    now = judged = time.time()
    report = judge(nodes, cluster["pods"], cluster["daemonsets"], now, resource_slices=cluster["resourceslices"],
                   node_facts=params["node_facts"],
                   previous_report=previous, pending_minutes=pending_minutes, cordon_minutes=cordon_minutes,
                   target_driver=params["target_driver_version"], vram_rows=vram_rows)
    if params["nodes"]:
        wanted = set(params["nodes"])
        report["findings"] = [item for item in report["findings"] if item["node"] in wanted or item["node"] is None]
        report["nodes"] = dict((name, node) for name, node in report["nodes"].items() if name in wanted)
    report["generated_at"] = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    report["api"] = {"list_calls": len(lists), "lists": list(lists), "list_seconds": lists, "discovery_calls": 1,
                     "read_seconds": round(judged - started, 3), "seconds": round(time.time() - started, 3)}
    report["vram_source"] = "prometheus %s" % VRAM_QUERY if vram_rows is not None else "nvidia-smi on the nodes"
    report["baseline"] = previous_path if previous is not None else None
    week = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isocalendar()
    ssh_nodes = nodes_to_look_at(report["findings"], report["nodes"], params["look_at"], params["sample"],
                                 seed="%d-W%02d" % (week[0], week[1]))
    report["ssh_nodes"] = ssh_nodes
    files = [] if module.check_mode or not params["report_dir"] else write_report(module, report, params["report_dir"])
    module.exit_json(changed=bool(files), critical=report["summary"]["critical"], summary=report["summary"],
                     findings=report["findings"], nodes=report["nodes"], ssh_nodes=ssh_nodes,
                     driver_versions=report["driver_versions"], vram_top=report["vram_top"], api=report["api"],
                     report_files=files)


if __name__ == "__main__":
    main()
