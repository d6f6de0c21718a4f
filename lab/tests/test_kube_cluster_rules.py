"""Pure placement and device-plugin rules of the Kubernetes twin (no store, no threads)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpulab.kube.sim import deviceplugin, scheduler
from gpulab.kube.sim.workloads import rollout_targets, wanted_node_taints
from gpulab.kube.testing import make_gpus


def node(name="gpu-0", labels=None, taints=None, unschedulable=False, allocatable=None):
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"allocatable": allocatable or {"cpu": "95", "memory": "1000Gi", "pods": "110",
                                                      "nvidia.com/gpu": "8"}}}


def pod(gpus=0, cpu=None, tolerations=None, node_selector=None, affinity=None, phase="Pending"):
    resources = {}
    if gpus:
        resources.setdefault("limits", {})["nvidia.com/gpu"] = str(gpus)
    if cpu:
        resources.setdefault("requests", {})["cpu"] = cpu
    spec = {"containers": [{"name": "c", "resources": resources}]}
    if tolerations:
        spec["tolerations"] = tolerations
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize("text, base_units", [
    ("500m", Decimal("0.5")), ("8", Decimal(8)), ("80Gi", Decimal(80 * 2 ** 30)), ("1k", Decimal(1000)),
    (8, Decimal(8)), ("1e3", Decimal(1000))])
def test_quantities_are_read_in_base_units(text, base_units):
    assert scheduler.parse_quantity(text) == base_units


def test_a_bad_quantity_is_refused_with_its_text():
    with pytest.raises(ValueError, match="invalid resource quantity '8 GPUs'"):
        scheduler.parse_quantity("8 GPUs")


def test_gpu_limits_count_as_requests_and_sum_over_containers():
    two_containers = pod(gpus=2)
    two_containers["spec"]["containers"].append({"name": "d", "resources": {"limits": {"nvidia.com/gpu": "3"}}})
    assert scheduler.pod_requests(two_containers)["nvidia.com/gpu"] == 5


def test_toleration_matching_follows_operator_key_value_and_effect():
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert scheduler.tolerates([{"key": "nvidia.com/gpu", "operator": "Exists"}], taint)
    assert scheduler.tolerates([{"operator": "Exists"}], taint)
    assert scheduler.tolerates([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}], taint)
    assert not scheduler.tolerates([{"key": "nvidia.com/gpu", "value": "absent"}], taint)
    assert not scheduler.tolerates([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], taint)


def test_cordoned_node_refuses_pods_unless_they_tolerate_unschedulable():
    cordoned = node(unschedulable=True)
    free = scheduler.free_resources(cordoned, [])
    assert scheduler.unfit_reasons(pod(), cordoned, free) == ["node(s) were unschedulable"]
    tolerant = pod(tolerations=[{"key": scheduler.UNSCHEDULABLE_TAINT_KEY, "operator": "Exists",
                                 "effect": "NoSchedule"}])
    assert scheduler.unfit_reasons(tolerant, cordoned, free) == []


def test_required_node_affinity_terms_are_ored_and_expressions_anded():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]},
                              {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["4"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]}]}}}
    h100x8 = node(labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"})
    h100x4 = node(labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "4"})
    assert scheduler.node_matches_affinity(pod(affinity=affinity), h100x8)
    assert not scheduler.node_matches_affinity(pod(affinity=affinity), h100x4)
    assert scheduler.node_matches_affinity(pod(affinity=affinity), node(name="special"))


def test_bound_gpus_are_not_offered_twice_but_finished_pods_give_them_back():
    gpu_node = node()
    running = pod(gpus=6, phase="Running")
    finished = pod(gpus=8, phase="Succeeded")
    free = scheduler.free_resources(gpu_node, [running, finished])
    assert free["nvidia.com/gpu"] == 2 and free["pods"] == 109
    assert scheduler.unfit_reasons(pod(gpus=4), gpu_node, free) == ["Insufficient nvidia.com/gpu"]


def test_placement_spreads_pods_and_explains_why_none_fit():
    nodes = [node("gpu-0"), node("gpu-1"), node("cpu-0", allocatable={"cpu": "8", "pods": "110"})]
    placement = scheduler.Placement(nodes, [])
    chosen = []
    for _ in range(4):
        name, _ = placement.pick(pod(gpus=4))
        placement.assign(pod(gpus=4), name)
        chosen.append(name)
    assert sorted(chosen) == ["gpu-0", "gpu-0", "gpu-1", "gpu-1"]
    name, message = placement.pick(pod(gpus=1))
    assert name is None
    assert message == ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available:"
                       " 3 Preemption is not helpful for scheduling.")


def test_cordon_and_unreachable_taints_come_and_go_with_node_state():
    cordoned = node(unschedulable=True)
    cordoned["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    keys = {(t["key"], t["effect"]) for t in wanted_node_taints(cordoned, 0.0)}
    assert keys == {("node.kubernetes.io/unschedulable", "NoSchedule"),
                    ("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")}
    healthy = node(taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    healthy["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert wanted_node_taints(healthy, 0.0) == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]


def test_rolling_update_surges_then_retires_old_pods_within_max_unavailable():
    spec = {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}}
    new_rs = {"metadata": {"name": "new"}, "spec": {"replicas": 0}, "status": {}}
    old_rs = {"metadata": {"name": "old"}, "spec": {"replicas": 4}, "status": {"availableReplicas": 4}}
    targets = {rs["metadata"]["name"]: replicas for rs, replicas in rollout_targets(spec, 4, new_rs, [old_rs])}
    assert targets == {"new": 1, "old": 3}


def test_single_strategy_counts_gpus_and_mixed_counts_each_mig_profile():
    plain = make_gpus(8)
    assert deviceplugin.extended_resources(plain, "single") == {"nvidia.com/gpu": 8}
    mig = make_gpus(2, mig_profiles=["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    assert deviceplugin.extended_resources(mig, "single") == {"nvidia.com/gpu": 8}
    assert deviceplugin.extended_resources(mig + make_gpus(1), "mixed") == {
        "nvidia.com/gpu": 1, "nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-1g.10gb": 4}


def test_gfd_labels_name_the_product_memory_and_driver_version():
    labels = deviceplugin.gfd_labels(make_gpus(8), "550.54.15", mig_capable=True)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8" and labels["nvidia.com/gpu.memory"] == "81559"
    assert (labels["nvidia.com/cuda.driver-version.major"], labels["nvidia.com/cuda.driver-version.minor"],
            labels["nvidia.com/cuda.driver-version.revision"]) == ("550", "54", "15")
    assert deviceplugin.gfd_labels([], None, mig_capable=True) == {}


def test_gfd_labels_of_an_old_driver_are_replaced_not_merged():
    old = deviceplugin.gfd_labels(make_gpus(8), "550.54.15", mig_capable=True)
    current = dict(old, **{"kubernetes.io/hostname": "gpu-0", "nvidia.com/mig-1g.10gb.count": "7"})
    new = deviceplugin.apply_gfd_labels(current, deviceplugin.gfd_labels(make_gpus(8), "570.86.15", True))
    assert new["nvidia.com/cuda.driver-version.full"] == "570.86.15"
    assert "nvidia.com/mig-1g.10gb.count" not in new and new["kubernetes.io/hostname"] == "gpu-0"
