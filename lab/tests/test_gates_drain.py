"""gpuops.nvidia.node_drain over real HTTPS against the Kubernetes twin of a gpulab lab, through ansible-playbook,
checked against the twin's records and against real kubectl drain on the same scenario."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from gates_helpers import (KUBECTL, apply, bare_pod, changes_since, deployment, eventually, get_json, kubectl, pdb,
                          place_on, pods_on, run_in_playbook)
from gpulab.testkit.api_records import requests

pytestmark = pytest.mark.skipif(not os.path.exists(KUBECTL) or collections_path() is None,
                                reason="needs /usr/bin/kubectl and the collection on ANSIBLE_COLLECTIONS_PATH")

NODES = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
CORDON = "gpuops.nvidia/cordon"
REASON = "gpuops.nvidia/cordon-reason"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("gates-drain") / "state")
    running = start_lab(state_dir, "--nodes", "3", "--boot-delay", "0.3")
    eventually(lambda: len(get_json(running, "nodes")["items"]) == 3, what="3 nodes in the API")
    yield running
    stop_lab(running)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


@pytest.fixture
def ns(lab, request):
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-")
    kubectl(lab, "create", "namespace", name)
    yield name
    kubectl(lab, "delete", "namespace", name, "--wait=false", check=False)
    for node in NODES:   # every test leaves the nodes schedulable, whatever it did
        kubectl(lab, "uncordon", node, check=False)
        kubectl(lab, "annotate", "node", node, CORDON + "-", REASON + "-", check=False)


def node_json(lab, name):
    return get_json(lab, "node", name)


def evictions(requests):
    return [record for record in requests if record["path"].endswith("/eviction") and record["method"] == "POST"]


def no_pdb_violation(lab):
    checker = subprocess.run([sys.executable, "-m", "gpulab.kube.sim.checker", lab.state_dir], capture_output=True,
                             text=True, env=lab.env, timeout=120)
    report = json.loads(checker.stdout)
    return report


def test_drain_waits_on_a_pdb_that_first_blocks_then_allows(lab, ns):
    labels = {"app": "web"}
    place_on(lab, "gpu-node-01", [deployment("web", ns, 3, labels), pdb("web", ns, labels, 2)], ns,
             ["gpu-node-02", "gpu-node-03"])
    web = sorted(pods_on(lab, "gpu-node-01", ns))
    assert len(web) == 3
    since = time.time()
    result = run_in_playbook(lab, "node_drain", {"name": "gpu-node-01", "timeout": 90})
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] and result["unschedulable"]
    assert result["evicted"] == web and result["blocked"] == [] and result["refused"] == []
    assert [entry["reason"] for entry in result["ignored"]] == ["DaemonSet-managed"]
    # the budget (minAvailable 2 of 3) let one pod go at a time: it blocked (disruptionsAllowed 0) and allowed again
    # once a replacement ran elsewhere; two evictions waited for it
    assert len(result["waited_for_budget"]) >= 2, result["waited_for_budget"]
    allowed = [change["object"]["status"].get("disruptionsAllowed") for change in
               changes_since(lab, since, "poddisruptionbudgets") if change["namespace"] == ns]
    assert 0 in allowed and allowed[allowed.index(0):].count(1) >= 1, allowed
    codes = [record["code"] for record in evictions(requests(lab.state_dir, since)) if "/namespaces/%s/" % ns in
             record["path"]]
    assert codes.count(201) == 3 and set(codes) <= {201, 429}, codes
    assert pods_on(lab, "gpu-node-01", ns) == {}
    eventually(lambda: len([pod for pod in get_json(lab, "pods", "-n", ns)["items"]
                            if pod["status"].get("phase") == "Running"]) == 3, what="3 web pods running elsewhere")
    node = node_json(lab, "gpu-node-01")
    assert node["spec"]["unschedulable"] is True
    assert json.loads(node["metadata"]["annotations"][CORDON])["was_unschedulable"] is False
    report = no_pdb_violation(lab)
    assert report.get("pdb_violations") == [], report

    uncordon = run_in_playbook(lab, "node_drain", {"name": "gpu-node-01", "state": "uncordon"})
    assert uncordon["changed"] and uncordon["uncordoned"]
    node = node_json(lab, "gpu-node-01")
    assert not node["spec"].get("unschedulable") and CORDON not in node["metadata"].get("annotations", {})


def test_emptydir_and_unreplicated_pods_are_refused_before_any_eviction(lab, ns):
    scratch = [{"name": "scratch", "emptyDir": {}}]
    place_on(lab, "gpu-node-02", [deployment("cache", ns, 1, volumes=scratch), deployment("web", ns, 1)], ns,
             ["gpu-node-01", "gpu-node-03"])
    kubectl(lab, "apply", "-f", "-", stdin=json.dumps(bare_pod("bare", ns, "gpu-node-02")))
    eventually(lambda: len(pods_on(lab, "gpu-node-02", ns)) == 3, what="3 pods on gpu-node-02")
    cache = next(key for key in pods_on(lab, "gpu-node-02", ns) if "/cache-" in key)
    since = time.time()
    result = run_in_playbook(lab, "node_drain", {"name": "gpu-node-02"})
    assert result["failed"] and "nothing was evicted" in result["msg"]
    refused = {entry["pod"]: entry["reason"] for entry in result["refused"]}
    assert set(refused) == {cache, ns + "/bare"}
    assert "delete_emptydir_data" in refused[cache] and "force" in refused[ns + "/bare"]
    assert evictions(requests(lab.state_dir, since)) == []
    node = node_json(lab, "gpu-node-02")
    assert not node["spec"].get("unschedulable"), "the cordon of the refused drain was not undone"
    assert CORDON not in node["metadata"].get("annotations", {})
    assert len(pods_on(lab, "gpu-node-02", ns)) == 3

    since = time.time()
    allowed = run_in_playbook(lab, "node_drain", {"name": "gpu-node-02", "force": True, "delete_emptydir_data": True,
                                             "grace_period": 0})
    assert not allowed.get("failed"), allowed.get("msg")
    assert set(allowed["evicted"]) == set(refused) | {key for key in allowed["pods_to_evict"] if "/web-" in key}
    assert pods_on(lab, "gpu-node-02", ns) == {}
    # grace_period 0 is sent (kubernetes.core's k8s_drain drops it): the pods (terminationGracePeriodSeconds 30) are
    # deleted at once, never seen terminating
    evicted = set(allowed["evicted"])
    changes = [change for change in changes_since(lab, since, "pods")
               if "%s/%s" % (change["namespace"], change["name"]) in evicted]
    assert {"%s/%s" % (c["namespace"], c["name"]) for c in changes if c["event"] == "DELETED"} == evicted
    assert not [c for c in changes if c["event"] == "MODIFIED" and c["object"]["metadata"].get("deletionTimestamp")]


def test_timeout_leaves_the_node_cordoned_and_explained(lab, ns):
    lab.gpulab("fault", "gpu-node-03", "pdb-block")
    try:
        eventually(lambda: any(pod["status"].get("phase") == "Running" for pod in
                               pods_on(lab, "gpu-node-03", "gpulab-faults").values()), what="the pdb-block pod")
        result = run_in_playbook(lab, "node_drain", {"name": "gpu-node-03", "timeout": 5})
        assert result["failed"]
        assert result["msg"].startswith("drain of gpu-node-03 timed out after 5s with 1 pod(s) left; node left "
                                        "cordoned")
        assert "blocked by PDB gpulab-faults/pdb-block-gpu-node-03 (disruptionsAllowed 0)" in result["msg"]
        [blocked] = result["blocked"]
        assert blocked["pdbs"] == [{"name": "pdb-block-gpu-node-03", "namespace": "gpulab-faults",
                                    "disruptions_allowed": 0}]
        assert "disruption budget" in blocked["message"]
        assert 5 <= result["elapsed"] < 10
        node = node_json(lab, "gpu-node-03")
        assert node["spec"]["unschedulable"] is True
        assert node["metadata"]["annotations"][REASON] == result["msg"]
    finally:
        lab.gpulab("clear", "gpu-node-03", "pdb-block")


def test_uncordon_respects_a_cordon_made_before_ours(lab, ns):
    kubectl(lab, "cordon", "gpu-node-02")
    cordon = run_in_playbook(lab, "node_drain", {"name": "gpu-node-02", "state": "cordon", "reason": "driver upgrade"})
    assert cordon["changed"]
    annotations = node_json(lab, "gpu-node-02")["metadata"]["annotations"]
    assert json.loads(annotations[CORDON])["was_unschedulable"] is True and annotations[REASON] == "driver upgrade"
    again = run_in_playbook(lab, "node_drain", {"name": "gpu-node-02", "state": "cordon", "reason": "driver upgrade"})
    assert not again["changed"]

    uncordon = run_in_playbook(lab, "node_drain", {"name": "gpu-node-02", "state": "uncordon"})
    assert not uncordon["uncordoned"] and uncordon["unschedulable"]
    assert any("already cordoned before" in warning for warning in uncordon.get("warnings", []))
    node = node_json(lab, "gpu-node-02")
    assert node["spec"]["unschedulable"] is True and CORDON not in node["metadata"]["annotations"]

    foreign = run_in_playbook(lab, "node_drain", {"name": "gpu-node-02", "state": "uncordon"})
    assert not foreign["changed"] and any("not cordoned by" in w for w in foreign.get("warnings", []))
    forced = run_in_playbook(lab, "node_drain", {"name": "gpu-node-02", "state": "uncordon", "force": True})
    assert forced["changed"] and forced["uncordoned"]
    assert not node_json(lab, "gpu-node-02")["spec"].get("unschedulable")


@pytest.mark.parametrize("mode", ["dry_run", "check_mode"])
def test_dry_run_reports_evictions_and_blocking_pdbs_and_changes_nothing(lab, ns, mode):
    labels = {"app": "web"}
    place_on(lab, "gpu-node-01", [deployment("web", ns, 3, labels), pdb("web", ns, labels, 2)], ns,
             ["gpu-node-02", "gpu-node-03"])
    eventually(lambda: get_json(lab, "pdb", "-n", ns, "web")["status"].get("disruptionsAllowed") == 1,
               what="PDB status")
    since = time.time()
    args = {"name": "gpu-node-01"}
    if mode == "dry_run":
        args["dry_run"] = True
    result = run_in_playbook(lab, "node_drain", args, check_mode=mode == "check_mode")
    assert not result.get("failed"), result.get("msg")
    assert result["dry_run"] and result["changed"] and result["evicted"] == []
    assert result["pods_to_evict"] == sorted(pods_on(lab, "gpu-node-01", ns))
    [budget] = result["pdbs"]
    assert budget["name"] == "web" and budget["disruptions_allowed"] == 1 and budget["would_block"]
    assert len(result["blocked"]) == 2
    writes = [record for record in requests(lab.state_dir, since) if record["method"] not in ("GET",)]
    assert writes == []
    assert not node_json(lab, "gpu-node-01")["spec"].get("unschedulable")


def kubectl_pods(text, verb):
    return sorted(re.findall(r"%s pod (\S+/\S+) \(server dry run\)" % verb, text))


def test_node_drain_evicts_the_same_pods_as_kubectl_drain(lab, ns):
    scratch = [{"name": "scratch", "emptyDir": {}}]
    labels = {"app": "web"}
    place_on(lab, "gpu-node-03", [deployment("web", ns, 2, labels), pdb("web", ns, labels, 1),
                                  deployment("cache", ns, 1, volumes=scratch)], ns, ["gpu-node-01", "gpu-node-02"])
    kubectl(lab, "apply", "-f", "-", stdin=json.dumps(bare_pod("bare", ns, "gpu-node-03")))
    eventually(lambda: len(pods_on(lab, "gpu-node-03", ns)) == 4, what="4 pods on gpu-node-03")

    refused_by_kubectl = kubectl(lab, "drain", "gpu-node-03", "--ignore-daemonsets", "--dry-run=server",
                                 "--timeout=30s", check=False)
    assert refused_by_kubectl.returncode != 0
    refused = run_in_playbook(lab, "node_drain", {"name": "gpu-node-03"})
    assert refused["failed"]
    assert sorted(entry["pod"] for entry in refused["refused"]) == \
        sorted(set(re.findall(r"(%s/[a-z0-9-]+)" % ns, refused_by_kubectl.stderr)))

    by_kubectl = kubectl(lab, "drain", "gpu-node-03", "--ignore-daemonsets", "--force", "--delete-emptydir-data",
                         "--dry-run=server", "--timeout=60s")
    kubectl(lab, "uncordon", "gpu-node-03")
    result = run_in_playbook(lab, "node_drain", {"name": "gpu-node-03", "force": True, "delete_emptydir_data": True,
                                            "timeout": 90})
    assert not result.get("failed"), result.get("msg")
    assert result["evicted"] == kubectl_pods(by_kubectl.stdout, "evicting")
    assert len(result["evicted"]) == 4
    ignored_by_kubectl = re.search(r"ignoring DaemonSet-managed Pods: ([^\s;]+)", by_kubectl.stderr).group(1).split(",")
    assert [entry["pod"] for entry in result["ignored"]] == ignored_by_kubectl


def test_a_batch_drain_spends_one_budget_across_its_nodes_and_a_blocked_node_fails_alone(lab, ns):
    """names: two nodes drained in one module process. One PDB (minAvailable 3 of 4) spans both nodes: its single
    allowed disruption is taken in turn by the evictions of both, never overspent; gpu-node-02 also holds a pod no
    budget lets go: it alone fails, cordoned with its reason, while gpu-node-01 ends drained."""
    place_on(lab, "gpu-node-01", [deployment("web-a", ns, 2, {"app": "web", "part": "a"})], ns,
             ["gpu-node-02", "gpu-node-03"])
    place_on(lab, "gpu-node-02", [deployment("web-b", ns, 2, {"app": "web", "part": "b"})], ns,
             ["gpu-node-01", "gpu-node-03"])
    apply(lab, [pdb("web", ns, {"app": "web"}, 3)])
    eventually(lambda: get_json(lab, "pdb", "-n", ns, "web")["status"].get("disruptionsAllowed") == 1,
               what="PDB status")
    lab.gpulab("fault", "gpu-node-02", "pdb-block")
    try:
        eventually(lambda: any(pod["status"].get("phase") == "Running" for pod in
                               pods_on(lab, "gpu-node-02", "gpulab-faults").values()), what="the pdb-block pod")
        web = {node: sorted(pods_on(lab, node, ns)) for node in ("gpu-node-01", "gpu-node-02")}
        since = time.time()
        result = run_in_playbook(lab, "node_drain", {"names": ["gpu-node-01", "gpu-node-02"], "timeout": 45})
        assert not result.get("failed"), result.get("msg")
        assert result["failed_nodes"] == ["gpu-node-02"]
        drained, blocked = result["nodes"]["gpu-node-01"], result["nodes"]["gpu-node-02"]
        assert not drained["failed"] and drained["evicted"] == web["gpu-node-01"], drained
        assert blocked["msg"].startswith("drain of gpu-node-02 timed out after 45s"), blocked["msg"]
        assert "pdb-block-gpu-node-02" in blocked["msg"]
        assert set(web["gpu-node-02"]) <= set(blocked["evicted"]), blocked     # its own web pods went, in turn
        assert pods_on(lab, "gpu-node-01", ns) == {}
        for name in ("gpu-node-01", "gpu-node-02"):
            assert node_json(lab, name)["spec"]["unschedulable"] is True
        assert node_json(lab, "gpu-node-02")["metadata"]["annotations"][REASON] == blocked["msg"]
        codes = [record["code"] for record in evictions(requests(lab.state_dir, since))
                 if "/namespaces/%s/" % ns in record["path"]]
        assert codes.count(201) == 4, codes
        report = no_pdb_violation(lab)
        assert report.get("pdb_violations") == [], report
    finally:
        lab.gpulab("clear", "gpu-node-02", "pdb-block")
        for name in ("gpu-node-01", "gpu-node-02"):
            kubectl(lab, "uncordon", name, check=False)
