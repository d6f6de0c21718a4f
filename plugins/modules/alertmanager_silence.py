#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: alertmanager_silence
short_description: Silence a node's alerts in Alertmanager for its maintenance, and expire the silence afterwards
version_added: 0.1.0
description:
  - With O(state=present), makes sure Alertmanager holds a silence for each matcher set of O(matchers), for
    O(duration) seconds, made by O(created_by), whose comment names the node and the run
    (C([gpuops.nvidia node=NODE run=RUN_ID]) after O(comment)).
  - A live silence of the same run for the same node with the same matchers is reused (idempotent), and its end
    moved later when it would end before O(duration) from now (a resumed run); otherwise a silence is created.
  - With O(state=absent), expires the live silences whose comment names O(node) (and O(run_id) when given),
    whatever their matchers, so that the node's alerts ring again.
  - Uses Alertmanager's API v2 (C(GET /api/v2/silences) with a filter, C(POST /api/v2/silences),
    C(DELETE /api/v2/silence/{id})) from where the task runs, usually the controller with C(delegate_to=localhost).
  - Fails closed by default. When Alertmanager cannot be reached or answers with an error, the task fails, so a
    maintenance does not start while the node's alerts would page. With O(fail_closed=false) it warns and goes on
    (returning RV(error)); a silence that cannot be expired still ends at its end time.
author: gpuops.nvidia contributors (@gpuops)
options:
  url:
    description:
      - Base URL of Alertmanager, with its path prefix if it has one (C(--web.route-prefix)), for example
        V(https://alertmanager.example.com).
  state:
    description:
      - V(present) silences the node (creating or reusing silences); V(absent) expires the node's silences.
    type: str
    choices: [present, absent]
    default: present
  node:
    description:
      - The node under maintenance (its Kubernetes name). Named in every silence's comment and, when O(matchers)
        is omitted, in the matchers. Required unless O(nodes) is given.
    type: str
  nodes:
    description:
      - The nodes of a batch, instead of O(node) and O(matchers), each with its own matchers, silenced (or their
        silences expired) in one module process. Each node's outcome is in RV(nodes); the module itself does not
        fail, a node that O(fail_closed) fails is in RV(failed_nodes).
    type: list
    elements: dict
    suboptions:
      name:
        description: The node (as O(node)).
        type: str
        required: true
      matchers:
        description: The node's silences (as O(matchers)); omitted, the default matchers for the node.
        type: list
        elements: raw
  run_id:
    description:
      - The run the silences belong to (named in their comment; a re-run with the same id reuses them).
      - Required with O(state=present). With O(state=absent), only this run's silences are expired; omitted, every
        silence this module made for O(node) is.
    type: str
  matchers:
    description:
      - The silences to hold, one per element. An element is a matcher, or a list of matchers that must all match,
        written as in Alertmanager and PromQL (C(=), C(!=), C(=~), C(!~); regular expressions are anchored), for
        example V(Hostname="gpu-node-01") or V([node="gpu-node-01", severity!="info"]).
      - Alertmanager ANDs the matchers of one silence; the labels naming a node differ between exporters, hence one
        silence per label.
      - "Default, for O(node=gpu-node-01): V(instance=~\"gpu-node-01(:[0-9]+\\)?\") (node-exporter, with or without
        kube-prometheus' relabelling), V(Hostname=\"gpu-node-01\") (dcgm-exporter), V(node=\"gpu-node-01\")
        (kube-state-metrics, kubelet)."
      - Only used with O(state=present).
    type: list
    elements: raw
  created_by:
    description:
      - Who the silences are made by, as Alertmanager shows it (C(createdBy)); the runbook passes its lock holder
        (user, controller and run id).
    type: str
    default: gpuops.nvidia
  comment:
    description:
      - Text of the silences' comment, before the marker this module finds them by.
    type: str
    default: driver maintenance
  duration:
    description:
      - Seconds the silences last from now. They end by themselves then, even if nobody expires them (a killed
        run); pick the longest the maintenance may take.
    type: int
    default: 3600
  fail_closed:
    description:
      - V(true) fails the task when Alertmanager cannot be reached or answers with an error.
      - V(false) warns instead and returns RV(error); with O(state=present) the maintenance then goes on with the
        node's alerts loud.
    type: bool
    default: true
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.monitoring_http
attributes:
  check_mode:
    support: full
    details: In check mode the silences are read (so an unreachable Alertmanager still fails) but none is created, extended or expired.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Alertmanager keeps expired silences for its C(--data.retention) (120 hours by default), so a run's silences and
    their start and end times can be read afterwards.
  - Silences do not change what Prometheus reports; a C(prometheus_gate) on firing alerts is not affected.
seealso:
  - name: Alertmanager API v2
    description: The silences endpoints this module uses.
    link: https://github.com/prometheus/alertmanager/blob/main/api/v2/openapi.yaml
  - module: gpuops.nvidia.prometheus_gate
"""

EXAMPLES = r"""
- name: Silence the node's alerts for its maintenance (two hours at most)
  gpuops.nvidia.alertmanager_silence:
    url: https://alertmanager.example.com
    bearer_token: "{{ alertmanager_token }}"
    node: gpu-node-01
    run_id: 20261203T020000Z-1a2b
    created_by: alice@bastion/20261203T020000Z-1a2b
    comment: driver upgrade to 615.71.09
    duration: 7200
  delegate_to: localhost
  register: node_silence

- name: Only the node's GPU and node-down alerts, from dcgm-exporter and kube-state-metrics
  gpuops.nvidia.alertmanager_silence:
    url: http://alertmanager.monitoring:9093
    node: gpu-node-01
    run_id: 20261203T020000Z-1a2b
    matchers:
      - ['Hostname="gpu-node-01"', 'alertname=~"GPU.*"']
      - ['node="gpu-node-01"', 'alertname=~"KubeNodeNotReady|KubeNodeUnreachable"']
  delegate_to: localhost

- name: Maintenance over; the node's alerts ring again
  gpuops.nvidia.alertmanager_silence:
    url: https://alertmanager.example.com
    bearer_token: "{{ alertmanager_token }}"
    node: gpu-node-01
    run_id: 20261203T020000Z-1a2b
    state: absent
    fail_closed: false
  delegate_to: localhost
"""

RETURN = r"""
silence_ids:
  description:
    - IDs of the node's silences (created, reused or extended with O(state=present); expired with
      O(state=absent)). In check mode a silence that would be created has no ID and is not listed.
  returned: with O(node)
  type: list
  elements: str
  sample: ["0f5c2a4e-1d3b-4c55-9a0e-6a4cbb1f6f7b"]
silences:
  description: What was done per silence, in the order of O(matchers) (present) or of their IDs (absent).
  returned: with O(node)
  type: list
  elements: dict
  contains:
    id:
      description: The silence's ID (null for one check mode would create).
      type: str
    action:
      description: V(created), V(reused), V(extended) (its end moved later) or V(expired).
      type: str
    matchers:
      description: Its matchers, as text.
      type: list
      elements: str
    starts_at:
      description: When it starts (RFC 3339).
      type: str
    ends_at:
      description: When it ends (RFC 3339); for an expired one, as it was before expiring.
      type: str
    created_by:
      description: Who made it.
      type: str
    comment:
      description: Its comment, with the node and run marker.
      type: str
  sample: [{id: 0f5c2a4e-1d3b-4c55-9a0e-6a4cbb1f6f7b, action: created, matchers: ['Hostname="gpu-node-01"'],
            starts_at: "2026-12-03T02:00:00.000000Z", ends_at: "2026-12-03T04:00:00.000000Z",
            created_by: alice@bastion/20261203T020000Z-1a2b,
            comment: "driver upgrade to 615.71.09 [gpuops.nvidia node=gpu-node-01 run=20261203T020000Z-1a2b]"}]
nodes:
  description: With O(nodes), per node C(changed), C(failed), C(msg), C(silence_ids), C(silences) and C(error).
  returned: with O(nodes)
  type: dict
  sample: {gpu-node-01: {changed: true, failed: false, msg: "gpu-node-01: created 5f0d...", silence_ids: [5f0d...],
           silences: [], error: null}}
failed_nodes:
  description: With O(nodes), the nodes whose silences could not be held or expired (with O(fail_closed)).
  returned: with O(nodes)
  type: list
  elements: str
error:
  description: Why Alertmanager could not be used, when O(fail_closed=false) let the task go on; else null.
  returned: with O(node)
  type: str
  sample: "cannot reach Alertmanager at http://127.0.0.1:9093: [Errno 111] Connection refused"
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
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.alertmanager import (
    AlertmanagerAnswerError,
    default_matcher_sets,
    filter_params,
    normalize_matcher_sets,
    plan_present,
    silence_body,
    silences_to_expire,
    summary,
    validate_token,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.alertmanager_client import AlertmanagerClient
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.batch import run_per_node, summarize


def option_errors(params, node, matchers):
    """Every problem of the options for one node (its name and matchers)."""
    errors = [validate_token("node", node)]
    if params["state"] == "present" or params["run_id"] is not None:
        errors.append(validate_token("run_id", params["run_id"]))
    sets = []
    if params["state"] == "present":
        raw = matchers if matchers is not None else default_matcher_sets(node)
        sets, matcher_errors = normalize_matcher_sets(raw)
        errors.extend(matcher_errors)
        if not sets and not matcher_errors:
            errors.append("matchers is empty: nothing would be silenced")
    return sets, [error for error in errors if error]


def validated_matcher_sets(module):
    """The matcher sets to hold for each node, ``{node: sets}``, or fail_json with every problem at once."""
    params = module.params
    errors = monitoring_http_option_errors(params)
    if params["state"] == "present":
        if params["duration"] < 1:
            errors.append("duration must be at least 1 second")
        if not params["created_by"].strip():
            errors.append("created_by must not be empty")
    targets = [dict(name=params["node"], matchers=params["matchers"])] if params["nodes"] is None else params["nodes"]
    sets_of = {}
    for target in targets:
        sets_of[target["name"]], node_errors = option_errors(params, target["name"], target["matchers"])
        errors.extend(("%s: %s" % (target["name"], error)) if params["nodes"] is not None else error
                      for error in node_errors)
    errors = [error for error in errors if error]
    if errors:
        module.fail_json(msg="invalid options: " + "; ".join(errors))
    return sets_of


def ensure_present(module, client, node, matcher_sets):
    params = module.params
    now = time.time()
    answers = {}  # one GET per distinct filter (sets without an equality matcher share the unfiltered one)
    for texts in matcher_sets:
        filters = tuple(filter_params(texts))
        if filters not in answers:
            answers[filters] = client.silences(filters)
    found_per_set = [answers[tuple(filter_params(texts))] for texts in matcher_sets]
    steps = plan_present(matcher_sets, found_per_set, node, params["run_id"], now, params["duration"])
    results = []
    try:
        for texts, (step, existing) in zip(matcher_sets, steps):
            if step == "reuse":
                results.append(summary(existing, "reused"))
                continue
            body = silence_body(texts, node, params["run_id"], params["created_by"], params["comment"], now,
                                params["duration"], silence_id=existing and existing["id"],
                                starts_at=existing and existing.get("startsAt"))
            silence_id = None if module.check_mode else client.post_silence(body)
            results.append(summary(dict(body, id=silence_id), "created" if step == "create" else "extended"))
    except AlertmanagerAnswerError:
        # nothing half-done: the silences made by this call go again before the error is reported
        for made in results:
            if made["action"] == "created" and made["id"]:
                try:
                    client.expire(made["id"])
                except AlertmanagerAnswerError:
                    pass
        raise
    return results


def ensure_absent(module, client, node):
    chosen = silences_to_expire(client.silences(), node, module.params["run_id"])
    for silence in chosen:
        if not module.check_mode:
            client.expire(silence["id"])
    return [summary(silence, "expired") for silence in chosen]


def silence_node(module, client, node, matcher_sets):
    """One node's silences held or expired: the result the module returns for it. With fail_closed, a failure
    to use Alertmanager is ``failed``; without, it is a warning (in ``warning``) and RV(error)."""
    try:
        if module.params["state"] == "present":
            silences = ensure_present(module, client, node, matcher_sets)
        else:
            silences = ensure_absent(module, client, node)
    except AlertmanagerAnswerError as error:
        what = "silencing" if module.params["state"] == "present" else "expiring the silences of"
        message = "%s node %s: %s" % (what, node, to_native(error))
        if module.params["fail_closed"]:
            return dict(failed=True, changed=False, msg=message + " (fail_closed; with fail_closed=false it warns and "
                                                                  "goes on)", error=message, silence_ids=[], silences=[])
        return dict(failed=False, changed=False, msg=message, error=message, warning=message, silence_ids=[],
                    silences=[])
    return dict(
        failed=False,
        changed=any(silence["action"] != "reused" for silence in silences),
        silence_ids=[silence["id"] for silence in silences if silence["id"]],
        silences=silences,
        error=None,
        msg="%s: %s" % (node, ", ".join(
            "%s %s" % (silence["action"], silence["id"] or "(check mode)") for silence in silences) or "no silence"),
    )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            monitoring_http_argument_spec(),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            node=dict(type="str"),
            nodes=dict(type="list", elements="dict", options=dict(
                name=dict(type="str", required=True),
                matchers=dict(type="list", elements="raw"),
            )),
            run_id=dict(type="str"),
            matchers=dict(type="list", elements="raw"),
            created_by=dict(type="str", default="gpuops.nvidia"),
            comment=dict(type="str", default="driver maintenance"),
            duration=dict(type="int", default=3600),
            fail_closed=dict(type="bool", default=True),
        ),
        required_by=MONITORING_HTTP_REQUIRED_BY,
        mutually_exclusive=MONITORING_HTTP_MUTUALLY_EXCLUSIVE + [("node", "nodes"), ("matchers", "nodes")],
        required_one_of=[("node", "nodes")],
        supports_check_mode=True,
    )
    sets_of = validated_matcher_sets(module)
    client = AlertmanagerClient(module.params)
    if module.params["nodes"] is not None:
        per_node = run_per_node(list(sets_of), lambda name: silence_node(module, client, name, sets_of[name]))
        for outcome in per_node.values():
            if outcome.pop("warning", None):
                module.warn(outcome["msg"])
        batch = summarize(per_node)
        module.exit_json(changed=batch["changed"], nodes=per_node, failed_nodes=batch["failed_nodes"])
    node = module.params["node"]
    result = silence_node(module, client, node, sets_of[node])
    if result.pop("failed"):
        module.fail_json(**result)
    if result.pop("warning", None):
        module.warn(result["msg"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
