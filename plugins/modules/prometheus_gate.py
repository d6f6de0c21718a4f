#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: prometheus_gate
short_description: Gate on PromQL thresholds and firing alerts, once or over a soak
version_added: 0.1.0
description:
  - Runs PromQL queries against Prometheus' HTTP API (C(/api/v1/query)) and compares their values with thresholds,
    and/or checks that no alert matching the given filters is firing (C(/api/v1/alerts)).
  - With O(duration), evaluates at the start, every O(interval) seconds and once more at the end of the soak, and
    fails at the first evaluation that has a violation.
  - Fails closed. An unreachable Prometheus, an HTTP or TLS error, a query error, an answer that is not
    Prometheus' (a proxy's login page), a range-vector or string result, a C(NaN) value, and an empty result of a
    O(queries[].required) query all fail the gate with a message naming the query.
  - Talks HTTP(S) from where the task runs (usually the controller, with C(delegate_to=localhost) and
    C(run_once)); never changes anything.
  - See C(docs/prometheus_gate.md) in the collection for the evaluation rules.
author: gpuops.nvidia contributors (@gpuops)
options:
  url:
    description:
      - Base URL of Prometheus (or of an API-compatible front such as Thanos Query), with its path prefix if it
        has one, for example V(https://prometheus.example.com/prometheus).
  queries:
    description:
      - PromQL expressions and the threshold each value must meet. Each query runs as an instant query at the time
        of the evaluation.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Unique name of the query, used in messages and results.
        type: str
        required: true
      query:
        description: PromQL expression giving an instant vector or a scalar.
        type: str
        required: true
      op:
        description: The comparison that must hold, as in C(value op threshold).
        type: str
        required: true
        choices: ['<', '<=', '>', '>=', '==', '!=']
      threshold:
        description: The number each value is compared with.
        type: float
        required: true
      aggregate:
        description:
          - V(each) compares every series of the result with the threshold (one violation per series that fails).
          - V(sum), V(min), V(max), V(avg) and V(count) reduce the series to one value first.
        type: str
        default: each
        choices: [each, sum, min, max, avg, count]
      required:
        description:
          - Whether an empty result fails the gate (a missing exporter looks like an empty result).
          - Set V(false) for queries whose healthy answer is "no series", such as C(DCGM_FI_DEV_XID_ERRORS != 0).
        type: bool
        default: true
  firing_alerts:
    description:
      - Fail when an alert that matches these filters is firing (alerts still pending in their C(for) do not count).
      - Omit to not check alerts; V({}) fails on any firing alert.
      - Stacks like kube-prometheus-stack keep a C(Watchdog) alert always firing; exclude it with a matcher.
    type: dict
    suboptions:
      names:
        description: Only alerts with one of these names (C(alertname)); all names when empty.
        type: list
        elements: str
        default: []
      matchers:
        description:
          - Label matchers every alert must meet, written as in PromQL and Alertmanager (C(=), C(!=), C(=~), C(!~);
            regular expressions are anchored), for example V(severity="critical") or V(Hostname=~"gpu-node-0[1-4]").
        type: list
        elements: str
        default: []
  duration:
    description:
      - Length of the soak in seconds. V(0) evaluates once.
    type: int
    default: 0
  interval:
    description:
      - Seconds between evaluations during the soak.
    type: int
    default: 30
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.monitoring_http
attributes:
  check_mode:
    support: full
    details: In check mode the gate evaluates once (no soak) and reports a violation as a warning instead of failing.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Prometheus evaluates alerting rules every C(evaluation_interval); an alert fires one evaluation after its
    condition has held for its C(for).
seealso:
  - name: Prometheus HTTP API
    description: The query and alerts endpoints this module reads.
    link: https://prometheus.io/docs/prometheus/latest/querying/api/
"""

EXAMPLES = r"""
- name: Soak 10 minutes after the canary; fail on an Xid, a hot GPU, lost GPUs or a GPU alert
  gpuops.nvidia.prometheus_gate:
    url: "{{ gpuops_prometheus_url }}"
    bearer_token: "{{ gpuops_prometheus_token | default(omit) }}"
    duration: 600
    interval: 30
    queries:
      - name: no new Xid on the canary
        query: 'DCGM_FI_DEV_XID_ERRORS{Hostname="{{ inventory_hostname }}"} != 0'
        op: '=='
        threshold: 0
        required: false
      - name: canary GPUs below 85 C
        query: 'DCGM_FI_DEV_GPU_TEMP{Hostname="{{ inventory_hostname }}"}'
        op: '<'
        threshold: 85
      - name: all 8 GPUs allocatable
        query: 'kube_node_status_allocatable{node="{{ inventory_hostname }}",resource="nvidia_com_gpu"}'
        op: '=='
        threshold: 8
    firing_alerts:
      names: [GPUXidError, GPUMemoryECCUncorrectable, GPUAllocatableZero]
  delegate_to: localhost

- name: Fail when any critical alert fires, except the always-firing Watchdog
  gpuops.nvidia.prometheus_gate:
    url: https://prometheus.example.com
    ca_path: /etc/pki/prometheus-ca.pem
    firing_alerts:
      matchers: ['severity="critical"', 'alertname!="Watchdog"']
  delegate_to: localhost
  run_once: true

- name: Fleet-wide, at most 2 GPUs above 80 C
  gpuops.nvidia.prometheus_gate:
    url: http://prometheus.monitoring:9090
    queries:
      - name: hot GPUs
        query: DCGM_FI_DEV_GPU_TEMP > 80
        aggregate: count
        op: '<='
        threshold: 2
        required: false
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
passed:
  description: Whether every evaluation passed (in check mode, the one evaluation).
  returned: always
  type: bool
  sample: false
evaluations:
  description: How many evaluations ran (the soak stops at the first one that fails).
  returned: always
  type: int
  sample: 21
elapsed:
  description: Seconds from the first evaluation to the end of the last one.
  returned: always
  type: float
  sample: 600.4
violations:
  description: What failed in the last evaluation, one message per violation, each naming its query or alert.
  returned: always
  type: list
  elements: str
  sample: ["query 'canary GPUs below 85 C': {Hostname=\"gpu-node-01\", gpu=\"0\"} is 91, not < 85"]
queries:
  description: Per query, in the order given, its values and verdict in the last evaluation.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The query's name.
      type: str
    query:
      description: The PromQL expression.
      type: str
    op:
      description: The comparison.
      type: str
    threshold:
      description: The threshold.
      type: float
    aggregate:
      description: How series were reduced before comparing.
      type: str
    required:
      description: Whether an empty result fails.
      type: bool
    values:
      description:
        - The series of the result with their labels and value (a number, or C(NaN), C(+Inf), C(-Inf) as strings).
      type: list
      elements: dict
      sample: [{labels: {Hostname: gpu-node-01, gpu: "0"}, value: 91.0}]
    passed:
      description: Whether the query met its threshold.
      type: bool
    error:
      description: Why the query could not be run or read (HTTP, TLS, query or answer error), else null.
      type: str
    warnings:
      description:
        - The answer's warnings (PromQL annotations, a Thanos partial response); also shown as task warnings.
      type: list
      elements: str
    violations:
      description: This query's violation messages.
      type: list
      elements: str
  sample: [{name: canary GPUs below 85 C, query: DCGM_FI_DEV_GPU_TEMP, op: "<", threshold: 85.0, aggregate: each,
            required: true, values: [{labels: {gpu: "0"}, value: 41.0}], passed: true, error: null, violations: [],
            warnings: []}]
alerts_firing:
  description: The firing alerts that matched O(firing_alerts) in the last evaluation; empty when alerts are not checked.
  returned: always
  type: list
  elements: dict
  sample: [{name: GPUXidError, state: firing, labels: {alertname: GPUXidError, Hostname: gpu-node-01, gpu: "0"},
            active_at: "2026-12-03T03:08:20.113643416Z", value: "7.9e+01"}]
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.http import (
    MONITORING_HTTP_MUTUALLY_EXCLUSIVE,
    MONITORING_HTTP_REQUIRED_BY,
    monitoring_http_argument_spec,
    monitoring_http_option_errors,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.prometheus import (
    AGGREGATES,
    OPERATORS,
    PrometheusAnswerError,
    evaluate_query,
    failed_query,
    matching_firing_alerts,
    parse_alerts_data,
    parse_matcher,
    parse_query_data,
    seconds_until_next_evaluation,
    validate_query_specs,
    verdict,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.prometheus_client import PrometheusClient


def run_query(client, spec):
    try:
        data, warnings = client.call("/api/v1/query", {"query": spec["query"]})
        samples = parse_query_data(data)
    except PrometheusAnswerError as error:
        return failed_query(spec, to_native(error))
    return evaluate_query(spec, samples, warnings)


def check_alerts(client, alert_filter):
    if alert_filter is None:
        return None
    try:
        alerts = parse_alerts_data(client.call("/api/v1/alerts")[0])
    except PrometheusAnswerError as error:
        return {"firing": [], "error": to_native(error)}
    return {"firing": matching_firing_alerts(alerts, alert_filter["names"], alert_filter["matchers"]), "error": None}


def evaluate(client, specs, alert_filter):
    query_results = [run_query(client, spec) for spec in specs]
    alert_check = check_alerts(client, alert_filter)
    passed, violations = verdict(query_results, alert_check)
    return {"passed": passed, "violations": violations, "queries": query_results,
            "alerts_firing": alert_check["firing"] if alert_check else []}


def validated_options(module):
    """The query specs and the alert filter, or fail_json with every problem in the options at once."""
    params = module.params
    errors = validate_query_specs(params["queries"])
    errors.extend(monitoring_http_option_errors(params))
    if not params["queries"] and params["firing_alerts"] is None:
        errors.append("nothing to check: give queries, firing_alerts or both")
    if params["duration"] < 0:
        errors.append("duration must be 0 or more seconds")
    if params["interval"] < 1:
        errors.append("interval must be at least 1 second")
    alert_filter = None
    if params["firing_alerts"] is not None:
        matchers = []
        for text in params["firing_alerts"]["matchers"]:
            try:
                matchers.append(parse_matcher(text))
            except ValueError as error:
                errors.append("firing_alerts.matchers: %s" % error)
        alert_filter = {"names": params["firing_alerts"]["names"], "matchers": matchers}
    if errors:
        module.fail_json(msg="invalid options: " + "; ".join(errors))
    specs = [dict(spec, name=spec["name"].strip()) for spec in params["queries"]]
    return specs, alert_filter


def main():
    module = AnsibleModule(
        argument_spec=dict(
            monitoring_http_argument_spec(),
            queries=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                query=dict(type="str", required=True),
                op=dict(type="str", required=True, choices=list(OPERATORS)),
                threshold=dict(type="float", required=True),
                aggregate=dict(type="str", default="each", choices=list(AGGREGATES)),
                required=dict(type="bool", default=True),
            )),
            firing_alerts=dict(type="dict", options=dict(
                names=dict(type="list", elements="str", default=[]),
                matchers=dict(type="list", elements="str", default=[]),
            )),
            duration=dict(type="int", default=0),
            interval=dict(type="int", default=30),
        ),
        required_by=MONITORING_HTTP_REQUIRED_BY,
        mutually_exclusive=MONITORING_HTTP_MUTUALLY_EXCLUSIVE,
        supports_check_mode=True,
    )
    specs, alert_filter = validated_options(module)
    client = PrometheusClient.from_params(module.params)
    duration = 0 if module.check_mode else module.params["duration"]

    started = time.monotonic()
    evaluations = 0
    while True:
        outcome = evaluate(client, specs, alert_filter)
        evaluations += 1
        if not outcome["passed"]:
            break
        delay = seconds_until_next_evaluation(time.monotonic() - started, duration, module.params["interval"])
        if delay is None:
            break
        time.sleep(delay)
    elapsed = round(time.monotonic() - started, 3)

    result = dict(outcome, changed=False, evaluations=evaluations, elapsed=elapsed)
    for query in outcome["queries"]:
        for warning in query["warnings"]:
            module.warn("query %r: Prometheus warns: %s" % (query["name"], warning))
    if outcome["passed"]:
        module.exit_json(msg="prometheus gate passed: %d evaluation(s) over %ss" % (evaluations, elapsed), **result)
    summary = "prometheus gate failed at evaluation %d after %ss: %s" % (
        evaluations, elapsed, "; ".join(outcome["violations"]))
    if module.check_mode:
        module.warn(summary)
        module.exit_json(msg=summary, **result)
    module.fail_json(msg=summary, **result)


if __name__ == "__main__":
    main()
