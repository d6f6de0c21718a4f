"""The Kubernetes twin's control plane in process: controllers, scheduler, kubelets, device plugin,
cluster faults and the records checker, against F1's real Store and FakeNodeViews (no HTTPS here; the
kubectl tests are in test_kube_cluster_kubectl.py)."""

from __future__ import annotations

import json
import resource
import time

import pytest

from gpulab.kube.api.errors import ApiError
from gpulab.kube.sim import checker
from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.sim.deviceplugin import DAEMONSET_NAME, NAMESPACE as PLUGIN_NAMESPACE
from gpulab.kube.testing import FakeNodeView, make_gpus, wait_for


@pytest.fixture
def make_cluster(tmp_path):
    clusters = []

    def factory(views, **options):
        options.setdefault("heartbeat_s", 0.5)
        options.setdefault("tick_s", 0.05)
        options.setdefault("crash_backoff_s", 0.2)
        options.setdefault("container_start_s", 0.3)
        cluster = KubeCluster(str(tmp_path / ("lab%d" % len(clusters))), views, **options)
        clusters.append(cluster)
        return cluster.start(serve=False)

    yield factory
    for cluster in clusters:
        cluster.stop()


def gpu_nodes(count, gpus=8):
    return [FakeNodeView("gpu-%d" % index, gpus=make_gpus(gpus)) for index in range(count)]


def deployment(name, replicas, gpus_per_pod=0, node_selector=None, tolerations=None):
    container = {"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    if gpus_per_pod:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus_per_pod)}}
    pod_spec = {"containers": [container]}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}}}


def pods_of(store, app, namespace="default"):
    return store.list("pods", namespace, label_selector="app=%s" % app)[0]


def running_pods(store, app, namespace="default"):
    return [pod for pod in pods_of(store, app, namespace)
            if pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")]


def allocatable_gpus(store, node):
    return store.get("nodes", node)["status"]["allocatable"].get("nvidia.com/gpu")


def plugin_pod(store, node):
    pods = [pod for pod in store.list("pods", PLUGIN_NAMESPACE, field_selector="spec.nodeName=%s" % node)[0]
            if not pod["metadata"].get("deletionTimestamp")]
    return pods[0] if pods else None


def ready_status(store, node):
    return next(c["status"] for c in store.get("nodes", node)["status"]["conditions"] if c["type"] == "Ready")


# --- scheduling and workload controllers --------------------------------------------------------------

def test_deployment_replicas_land_only_on_nodes_with_free_gpus_and_matching_selector(make_cluster):
    views = gpu_nodes(3, gpus=2) + [FakeNodeView("cpu-0", gpus=[])]
    cluster = make_cluster(views)
    store = cluster.store
    wait_for(lambda: all(allocatable_gpus(store, v.name) == "2" for v in views[:3]), what="GPUs registered")
    store.patch("nodes", "gpu-2", {"metadata": {"labels": {"pool": "inference"}}}, "application/merge-patch+json")
    store.create("deployments", deployment("train", 5, gpus_per_pod=1, node_selector=None), "default")
    wait_for(lambda: len(running_pods(store, "train")) == 5, what="5 training pods running")
    nodes = [pod["spec"]["nodeName"] for pod in running_pods(store, "train")]
    assert "cpu-0" not in nodes
    assert max(nodes.count(name) for name in set(nodes)) <= 2, "no node holds more GPUs than it has"
    store.create("deployments", deployment("serve", 1, node_selector={"pool": "inference"}), "default")
    pod = wait_for(lambda: running_pods(store, "serve"), what="inference pod")[0]
    assert pod["spec"]["nodeName"] == "gpu-2"


def test_replicaset_pods_get_the_qos_class_of_their_template(make_cluster):
    store = make_cluster([]).store
    sized = deployment("sized", 1)
    sized["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"}}
    store.create("deployments", sized, "default")
    store.create("deployments", deployment("gpu-only", 1, gpus_per_pod=1), "default")
    for app, qos_class in (("sized", "Guaranteed"), ("gpu-only", "BestEffort")):
        pod = wait_for(lambda: pods_of(store, app), what="a %s pod" % app)[0]
        assert pod["status"]["qosClass"] == qos_class and pod["status"]["phase"] == "Pending"


def test_gpu_request_beyond_allocatable_stays_pending_with_the_scheduler_reason(make_cluster):
    cluster = make_cluster(gpu_nodes(2, gpus=4))
    store = cluster.store
    wait_for(lambda: allocatable_gpus(store, "gpu-1") == "4", what="GPUs registered")
    store.create("deployments", deployment("huge", 1, gpus_per_pod=8), "default")

    def scheduling_condition():
        for pod in pods_of(store, "huge"):
            for condition in pod["status"].get("conditions") or []:
                if condition["type"] == "PodScheduled" and condition["status"] == "False":
                    return condition
        return None
    condition = wait_for(scheduling_condition, what="Unschedulable condition")
    assert condition["reason"] == "Unschedulable"
    assert condition["message"].startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    event = wait_for(lambda: next((e for e in store.list("events", "default")[0]
                                   if e["reason"] == "FailedScheduling"), None), what="FailedScheduling event")
    assert event["type"] == "Warning" and event["message"] == condition["message"]


def test_cordoned_and_tainted_nodes_only_get_pods_that_tolerate_them(make_cluster):
    cluster = make_cluster(gpu_nodes(3))
    store = cluster.store
    wait_for(lambda: allocatable_gpus(store, "gpu-2") == "8", what="GPUs registered")
    store.patch("nodes", "gpu-0", {"spec": {"unschedulable": True}}, "application/merge-patch+json")
    store.patch("nodes", "gpu-1", {"spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present",
                                                        "effect": "NoSchedule"}]}}, "application/merge-patch+json")
    wait_for(lambda: any(t["key"] == "node.kubernetes.io/unschedulable"
                         for t in store.get("nodes", "gpu-0")["spec"].get("taints") or []),
             what="cordon taint added by the node lifecycle controller")
    store.create("deployments", deployment("plain", 4), "default")
    wait_for(lambda: len(running_pods(store, "plain")) == 4, what="plain pods")
    assert {pod["spec"]["nodeName"] for pod in running_pods(store, "plain")} == {"gpu-2"}
    toleration = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    store.create("deployments", deployment("tolerant", 6, tolerations=toleration), "default")
    wait_for(lambda: len(running_pods(store, "tolerant")) == 6, what="tolerant pods")
    assert {pod["spec"]["nodeName"] for pod in running_pods(store, "tolerant")} == {"gpu-1", "gpu-2"}


def test_device_plugin_daemonset_runs_one_pod_per_gpu_node_only(make_cluster):
    views = gpu_nodes(3) + [FakeNodeView("cpu-0", gpus=[])]
    cluster = make_cluster(views)
    store = cluster.store
    wait_for(lambda: store.get("daemonsets", DAEMONSET_NAME, PLUGIN_NAMESPACE)["status"].get("numberReady") == 3,
             what="3 ready plugin pods")
    pods = store.list("pods", PLUGIN_NAMESPACE, label_selector="app=nvidia-device-plugin-ds")[0]
    assert sorted(pod["spec"]["nodeName"] for pod in pods) == ["gpu-0", "gpu-1", "gpu-2"]
    status = store.get("daemonsets", DAEMONSET_NAME, PLUGIN_NAMESPACE)["status"]
    assert status["desiredNumberScheduled"] == 3 and status["updatedNumberScheduled"] == 3


def test_rollout_restart_replaces_every_replica_through_a_new_replicaset(make_cluster):
    cluster = make_cluster(gpu_nodes(2))
    store = cluster.store
    store.create("deployments", deployment("web", 3), "default")
    wait_for(lambda: len(running_pods(store, "web")) == 3, what="3 web pods")
    first_pods = {pod["metadata"]["name"] for pod in running_pods(store, "web")}
    store.patch("deployments", "web", {"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2026-12-02T15:00:00Z"}}}}}, "application/merge-patch+json", "default")

    def rolled_out():
        status = store.get("deployments", "web", "default")["status"]
        pods = {pod["metadata"]["name"] for pod in running_pods(store, "web")}
        return status.get("updatedReplicas") == 3 and status.get("availableReplicas") == 3 and \
            status.get("replicas") == 3 and not pods & first_pods
    wait_for(rolled_out, what="rollout complete")
    sets = store.list("replicasets", "default")[0]
    assert sorted(rs["spec"]["replicas"] for rs in sets) == [0, 3]


def test_drain_over_a_pdb_is_refused_with_429_until_replicas_run_elsewhere(make_cluster):
    cluster = make_cluster(gpu_nodes(3))
    store = cluster.store
    for node in ("gpu-1", "gpu-2"):
        store.patch("nodes", node, {"spec": {"unschedulable": True}}, "application/merge-patch+json")
    store.create("deployments", deployment("web", 3), "default")
    store.create("poddisruptionbudgets", {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                          "metadata": {"name": "web"},
                                          "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}},
                 "default")
    wait_for(lambda: len(running_pods(store, "web")) == 3, what="3 pods on gpu-0")
    for node in ("gpu-1", "gpu-2"):
        store.patch("nodes", node, {"spec": {"unschedulable": False}}, "application/merge-patch+json")
    store.patch("nodes", "gpu-0", {"spec": {"unschedulable": True}}, "application/merge-patch+json")
    first, second, _ = sorted(pod["metadata"]["name"] for pod in running_pods(store, "web"))
    assert store.evict("default", first, {})["code"] == 201
    with pytest.raises(ApiError) as refused:
        store.evict("default", second, {})
    assert refused.value.code == 429
    assert refused.value.details["causes"][0]["message"] == \
        "The disruption budget web needs 2 healthy pods and has 2 currently"
    wait_for(lambda: len([p for p in running_pods(store, "web") if p["spec"]["nodeName"] != "gpu-0"]) == 1
             and store.get("poddisruptionbudgets", "web", "default")["status"]["disruptionsAllowed"] == 1,
             what="replacement running elsewhere")
    assert store.evict("default", second, {})["code"] == 201


# --- kubelet, node twin ties -----------------------------------------------------------------------------

def test_gfd_labels_and_boot_id_follow_a_driver_upgrade_and_reboot(make_cluster):
    views = gpu_nodes(1)
    cluster = make_cluster(views)
    store = cluster.store
    labels = wait_for(lambda: store.get("nodes", "gpu-0")["metadata"].get("labels", {}).get(
        "nvidia.com/gpu.product") and store.get("nodes", "gpu-0")["metadata"]["labels"], what="GFD labels")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8" and labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.54.15"
    assert labels["nvidia.com/mig.capable"] == "true"
    old_boot_id = views[0].boot_id()
    views[0].reboot(driver_version="570.86.15")
    def node_after_reboot():
        node = store.get("nodes", "gpu-0")
        done = node["metadata"]["labels"].get("nvidia.com/cuda.driver-version.full") == "570.86.15" and \
            node["status"]["nodeInfo"]["bootID"] == views[0].boot_id()
        return node if done else None
    node = wait_for(node_after_reboot, what="new driver labels and bootID")
    assert node["metadata"]["labels"]["nvidia.com/cuda.driver-version.major"] == "570"
    assert node["metadata"]["labels"]["nvidia.com/cuda.driver-version.revision"] == "15"
    assert node["status"]["nodeInfo"]["bootID"] == views[0].boot_id() != old_boot_id


def test_node_is_not_ready_while_its_twin_is_down_and_ready_again_after_boot(make_cluster):
    views = gpu_nodes(2)
    cluster = make_cluster(views)
    store = cluster.store
    store.create("deployments", deployment("web", 2, node_selector={"kubernetes.io/hostname": "gpu-1"}), "default")
    wait_for(lambda: len(running_pods(store, "web")) == 2 and plugin_pod(store, "gpu-1"), what="pods on gpu-1")
    plugin_before = plugin_pod(store, "gpu-1")["metadata"]["name"]
    views[1].power_off()
    wait_for(lambda: ready_status(store, "gpu-1") == "Unknown", what="gpu-1 NotReady")
    taints = wait_for(lambda: {(t["key"], t["effect"]) for t in store.get("nodes", "gpu-1")["spec"].get("taints", [])},
                      what="taints")
    assert taints == {("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")}
    wait_for(lambda: all(not any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"])
                         for p in pods_of(store, "web")), what="pods not ready")
    views[1].power_on()
    wait_for(lambda: ready_status(store, "gpu-1") == "True" and not store.get("nodes", "gpu-1")["spec"].get("taints"),
             what="gpu-1 Ready again")
    wait_for(lambda: all(p["status"]["containerStatuses"][0]["restartCount"] == 1 for p in running_pods(store, "web"))
             and len(running_pods(store, "web")) == 2, what="containers restarted after the reboot")
    assert plugin_pod(store, "gpu-1")["metadata"]["name"] == plugin_before, "the DaemonSet pod survives a reboot"
    wait_for(lambda: allocatable_gpus(store, "gpu-1") == "8", what="plugin re-registered after the reboot")


def nvidia_smi_pod(name, node, argv):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
                     "containers": [{"name": "smi", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                                     "command": argv}]}}


def test_nvidia_smi_pod_log_is_the_nodes_output_and_its_phase_follows_the_exit_code(make_cluster):
    views = [FakeNodeView("gpu-0", gpus=make_gpus(2)), FakeNodeView("gpu-1", gpus=make_gpus(2), driver_version=None)]
    cluster = make_cluster(views)
    store = cluster.store
    store.create("pods", nvidia_smi_pod("smi-ok", "gpu-0", ["nvidia-smi", "-L"]), "default")
    store.create("pods", nvidia_smi_pod("smi-nodriver", "gpu-1", ["nvidia-smi", "-L"]), "default")
    wait_for(lambda: store.get("pods", "smi-ok", "default")["status"]["phase"] == "Succeeded", what="smi-ok done")
    wait_for(lambda: store.get("pods", "smi-nodriver", "default")["status"]["phase"] == "Failed", what="no driver")
    assert views[0].commands_run == [["nvidia-smi", "-L"]]
    expected = views[0].run(["nvidia-smi", "-L"])[1]
    assert store.pod_log_provider("default", "smi-ok", None, {}) == expected
    assert expected.startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    failed = store.get("pods", "smi-nodriver", "default")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert failed["exitCode"] == 9
    assert "couldn't communicate with the NVIDIA driver" in store.pod_log_provider("default", "smi-nodriver", None, {})


def test_mixed_mig_strategy_advertises_one_resource_per_mig_profile(make_cluster):
    views = [FakeNodeView("gpu-0", gpus=make_gpus(2, mig_profiles=["3g.40gb", "1g.10gb", "1g.10gb"]))]
    cluster = make_cluster(views, mig_strategy="mixed")
    store = cluster.store
    node = wait_for(lambda: store.get("nodes", "gpu-0")["status"].get("allocatable", {}).get("nvidia.com/mig-1g.10gb")
                    and store.get("nodes", "gpu-0"), what="MIG resources")
    assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "4"
    assert node["status"]["allocatable"]["nvidia.com/mig-3g.40gb"] == "2"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "0"
    assert node["metadata"]["labels"]["nvidia.com/mig-1g.10gb.count"] == "4"


def test_a_restarted_plugin_registers_mig_devices_made_a_moment_before_without_a_node_event(make_cluster):
    """nvidia-smi mig -cgi changes what NVML shows and no node event says so: the plugin started after it reads
    NVML when it starts, not the kubelet's last look at the node (the runbook restarts it right after -cgi)."""
    view = FakeNodeView("gpu-0", gpus=make_gpus(2))
    cluster = make_cluster([view], mig_strategy="mixed")
    store = cluster.store
    wait_for(lambda: allocatable_gpus(store, "gpu-0") == "2", what="GPUs registered")
    cluster.config.view_refresh_s = 3600.0
    time.sleep(0.2)
    view.set_gpus(make_gpus(2, mig_profiles=["3g.40gb", "1g.10gb"]), notify=False)
    store.delete("pods", plugin_pod(store, "gpu-0")["metadata"]["name"], PLUGIN_NAMESPACE)
    node = wait_for(lambda: store.get("nodes", "gpu-0")["status"]["allocatable"].get("nvidia.com/mig-1g.10gb") == "2"
                    and store.get("nodes", "gpu-0"), what="MIG resources of the restarted plugin")
    assert node["status"]["allocatable"]["nvidia.com/mig-3g.40gb"] == "2"


def test_dra_mode_publishes_a_resourceslice_instead_of_extended_resources(make_cluster):
    cluster = make_cluster(gpu_nodes(1, gpus=4), dra=True)
    store = cluster.store
    slices = wait_for(lambda: store.list("resourceslices")[0], what="ResourceSlice")
    assert slices[0]["spec"]["nodeName"] == "gpu-0" and slices[0]["spec"]["driver"] == "gpu.nvidia.com"
    assert [device["name"] for device in slices[0]["spec"]["devices"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert "nvidia.com/gpu" not in store.get("nodes", "gpu-0")["status"]["allocatable"]
    assert {c["metadata"]["name"] for c in store.list("deviceclasses")[0]} == {"gpu.nvidia.com", "mig.nvidia.com"}


# --- cluster faults ----------------------------------------------------------------------------------------

def test_stale_device_plugin_keeps_capacity_with_zero_allocatable_until_its_pod_is_recreated(make_cluster):
    cluster = make_cluster(gpu_nodes(2))
    store = cluster.store
    wait_for(lambda: allocatable_gpus(store, "gpu-1") == "8", what="GPUs registered")
    stale_pod = plugin_pod(store, "gpu-1")["metadata"]["name"]
    cluster.apply_fault("gpu-1", "stale-device-plugin")
    wait_for(lambda: allocatable_gpus(store, "gpu-1") == "0", what="allocatable 0")
    time.sleep(1.0)   # several heartbeats: the stale plugin must not heal by itself
    node = store.get("nodes", "gpu-1")
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8" and allocatable_gpus(store, "gpu-1") == "0"
    assert plugin_pod(store, "gpu-1")["status"]["phase"] == "Running"
    bound = nvidia_smi_pod("pinned", "gpu-1", ["nvidia-smi", "-L"])
    bound["spec"] = dict(bound["spec"], nodeName="gpu-1")
    bound["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    store.create("pods", bound, "default")
    rejected = wait_for(lambda: store.get("pods", "pinned", "default")["status"].get("phase") == "Failed"
                        and store.get("pods", "pinned", "default")["status"], what="kubelet admission rejects")
    assert rejected["reason"] == "OutOfnvidia.com/gpu"
    assert rejected["message"] == ("Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
                                   "requested: 1, used: 0, capacity: 0")
    store.delete("pods", stale_pod, PLUGIN_NAMESPACE)
    wait_for(lambda: allocatable_gpus(store, "gpu-1") == "8", what="allocatable back after the plugin pod is recreated")
    assert plugin_pod(store, "gpu-1")["metadata"]["name"] != stale_pod


def test_gpu_lost_from_nvml_goes_unhealthy_allocatable_drops_capacity_stays_until_it_is_back(make_cluster):
    view = FakeNodeView("gpu-0", gpus=make_gpus(8))
    cluster = make_cluster([view])
    store = cluster.store
    wait_for(lambda: allocatable_gpus(store, "gpu-0") == "8", what="GPUs registered")
    gpus = view.visible_gpus()
    lost = gpus[3]
    view.set_gpus([gpu for gpu in gpus if gpu["uuid"] != lost["uuid"]])   # Xid 79: off the bus
    wait_for(lambda: allocatable_gpus(store, "gpu-0") == "7", what="allocatable 7")
    assert store.get("nodes", "gpu-0")["status"]["capacity"]["nvidia.com/gpu"] == "8"
    plugin = plugin_pod(store, "gpu-0")["metadata"]
    log = store.pod_log_provider(plugin["namespace"], plugin["name"], None, {})
    assert "'nvidia.com/gpu' device marked unhealthy: %s" % lost["uuid"] in log
    view.set_gpus(gpus)   # GPU reset
    wait_for(lambda: allocatable_gpus(store, "gpu-0") == "8", what="allocatable back to 8")


def test_device_plugin_crash_loops_with_the_nvml_failure_and_zero_allocatable(make_cluster):
    cluster = make_cluster(gpu_nodes(1))
    store = cluster.store
    wait_for(lambda: allocatable_gpus(store, "gpu-0") == "8", what="GPUs registered")
    cluster.apply_fault("gpu-0", "device-plugin-crash")
    status = wait_for(lambda: (plugin_pod(store, "gpu-0")["status"]["containerStatuses"][0]["restartCount"] >= 2)
                      and plugin_pod(store, "gpu-0")["status"]["containerStatuses"][0], what="restarts rising")
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert allocatable_gpus(store, "gpu-0") == "0"
    log = store.pod_log_provider(PLUGIN_NAMESPACE, plugin_pod(store, "gpu-0")["metadata"]["name"], None, {})
    assert "Failed to initialize NVML: could not load NVML library" in log
    cluster.clear_fault("gpu-0", "device-plugin-crash")
    wait_for(lambda: allocatable_gpus(store, "gpu-0") == "8", timeout_s=15, what="plugin recovered")


def test_kubelet_restart_drops_allocatable_briefly_and_the_plugin_re_registers(make_cluster):
    cluster = make_cluster(gpu_nodes(1))
    store = cluster.store
    wait_for(lambda: allocatable_gpus(store, "gpu-0") == "8", what="GPUs registered")
    cluster.apply_fault("gpu-0", "kubelet-restart")
    wait_for(lambda: allocatable_gpus(store, "gpu-0") == "0", what="registration dropped")
    wait_for(lambda: allocatable_gpus(store, "gpu-0") == "8", what="re-registered")
    log = store.pod_log_provider(PLUGIN_NAMESPACE, plugin_pod(store, "gpu-0")["metadata"]["name"], None, {})
    assert "kubelet.sock created, restarting." in log


def test_pdb_block_fault_pins_a_workload_whose_pdb_allows_no_disruption(make_cluster):
    cluster = make_cluster(gpu_nodes(2))
    store = cluster.store
    cluster.apply_fault("gpu-1", "pdb-block")
    pod = wait_for(lambda: running_pods(store, "pdb-block-gpu-1", "gpulab-faults"), what="blocker pod")[0]
    assert pod["spec"]["nodeName"] == "gpu-1"
    with pytest.raises(ApiError) as refused:
        store.evict("gpulab-faults", pod["metadata"]["name"], {})
    assert refused.value.code == 429
    cluster.clear_fault("gpu-1", "pdb-block")
    wait_for(lambda: not pods_of(store, "pdb-block-gpu-1", "gpulab-faults"), what="blocker gone")


def test_kubelet_down_fault_makes_the_node_not_ready_with_the_unreachable_taint(make_cluster):
    cluster = make_cluster(gpu_nodes(1))
    store = cluster.store
    wait_for(lambda: ready_status(store, "gpu-0") == "True", what="Ready")
    cluster.apply_fault("gpu-0", "kubelet-down")
    wait_for(lambda: ready_status(store, "gpu-0") == "Unknown", what="NotReady")
    wait_for(lambda: {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"} in
             (store.get("nodes", "gpu-0")["spec"].get("taints") or []), what="unreachable taint")
    cluster.clear_fault("gpu-0", "kubelet-down")
    wait_for(lambda: ready_status(store, "gpu-0") == "True", what="Ready again")


def test_unknown_fault_kind_is_refused_with_the_known_kinds(tmp_path):
    cluster = KubeCluster(str(tmp_path), gpu_nodes(1), record=False)
    with pytest.raises(ValueError, match="unknown cluster fault kind 'gpu-on-fire'.*stale-device-plugin"):
        cluster.apply_fault("gpu-0", "gpu-on-fire")


# --- scale -------------------------------------------------------------------------------------------------

def test_api_only_mode_serves_a_thousand_gpu_nodes(make_cluster, capsys):
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.time()
    cluster = make_cluster(gpu_nodes(2), api_only=1000)
    start_s = time.time() - started
    store = cluster.store
    started = time.time()
    nodes, _ = store.list("nodes")
    list_s = time.time() - started
    assert len(nodes) == 1002
    started = time.time()
    ready = store.list("nodes", label_selector="gpulab.io/api-only=true")[0]
    selector_list_s = time.time() - started
    assert len(ready) == 1000
    assert all(node["status"]["allocatable"]["nvidia.com/gpu"] == "8" for node in ready)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kib) / 1024.0
    store.create("deployments", deployment("wide", 20, gpus_per_pod=8), "default")
    started = time.time()
    wait_for(lambda: len(running_pods(store, "wide")) == 20, timeout_s=30, what="20 pods on api-only nodes")
    schedule_s = time.time() - started
    with capsys.disabled():
        print("\n[api-only 1000] start %.2fs, list nodes %.3fs, label-selector list %.3fs, 20 full-node pods "
              "scheduled+running %.2fs, max RSS growth %.0f MiB" % (start_s, list_s, selector_list_s, schedule_s,
                                                                   grown_mib))
    assert list_s < 2.0


# --- records checker ---------------------------------------------------------------------------------------

def test_checker_reports_two_gpu_nodes_cordoned_at_once(make_cluster, tmp_path):
    cluster = make_cluster(gpu_nodes(3))
    store = cluster.store
    wait_for(lambda: allocatable_gpus(store, "gpu-2") == "8", what="GPUs registered")
    cordon = {"spec": {"unschedulable": True}}
    uncordon = {"spec": {"unschedulable": False}}
    store.patch("nodes", "gpu-0", cordon, "application/merge-patch+json")
    store.patch("nodes", "gpu-1", cordon, "application/merge-patch+json")
    store.patch("nodes", "gpu-0", uncordon, "application/merge-patch+json")
    store.patch("nodes", "gpu-2", cordon, "application/merge-patch+json")
    store.patch("nodes", "gpu-1", uncordon, "application/merge-patch+json")
    store.patch("nodes", "gpu-2", uncordon, "application/merge-patch+json")
    report = checker.check_state_dir(cluster.state_dir, max_unavailable=1)
    assert report["max_unavailable_gpu_nodes"] == 2
    assert report["max_unavailable_nodes"] == ["gpu-0", "gpu-1"]
    assert report["max_unavailable_ok"] is False and report["ok"] is False
    assert checker.main([cluster.state_dir, "--max-unavailable", "2"]) == 0
    assert checker.main([cluster.state_dir, "--max-unavailable", "1"]) == 1


def _change(ts, event, resource, obj):
    return {"ts": ts, "record": "change", "event": event, "resource": resource,
            "namespace": obj["metadata"].get("namespace"), "name": obj["metadata"]["name"],
            "resourceVersion": str(int(ts * 10)), "object": obj}


def _ready_pod(name, deleting=False):
    metadata = {"name": name, "namespace": "default", "labels": {"app": "db"}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-02T15:00:30Z"
    return {"metadata": metadata, "spec": {"nodeName": "gpu-0"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_checker_reports_an_admitted_eviction_that_broke_a_pdb(tmp_path):
    pdb = {"metadata": {"name": "db", "namespace": "default", "generation": 1},
           "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}}}
    records = [
        _change(1.0, "ADDED", "poddisruptionbudgets", pdb),
        _change(1.1, "ADDED", "pods", _ready_pod("db-0")),
        _change(1.2, "ADDED", "pods", _ready_pod("db-1")),
        # An eviction the API wrongly admitted: 2 healthy pods, 2 needed.
        _change(2.0, "MODIFIED", "pods", _ready_pod("db-0", deleting=True)),
        {"ts": 2.01, "record": "request", "method": "POST", "code": 201, "verb": "create",
         "path": "/api/v1/namespaces/default/pods/db-0/eviction", "query": ""},
    ]
    (tmp_path / "kube-records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    report = checker.check_state_dir(str(tmp_path))
    assert report["evictions_admitted"] == 1
    assert [(v["pod"], v["pdb"]) for v in report["pdb_violations"]] == [("db-0", "db")]
    assert report["pdb_violations"][0]["why"] == "The disruption budget db needs 2 healthy pods and has 2 currently"
    assert report["ok"] is False


def test_checker_accepts_the_evictions_of_a_real_drain_and_counts_reboots(make_cluster):
    views = gpu_nodes(3)
    cluster = make_cluster(views)
    store = cluster.store
    store.create("deployments", deployment("web", 3), "default")
    store.create("poddisruptionbudgets", {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                          "metadata": {"name": "web"},
                                          "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}},
                 "default")
    wait_for(lambda: len([p for p in running_pods(store, "web")
                          if any(c["type"] == "Ready" and c["status"] == "True"
                                 for c in p["status"]["conditions"])]) == 3
             and store.get("poddisruptionbudgets", "web", "default")["status"]["disruptionsAllowed"] == 1,
             what="web ready")
    victim = running_pods(store, "web")[0]
    store.evict("default", victim["metadata"]["name"], {})
    # In process there is no HTTP request record; write the one the API server would.
    cluster.recorder.record_request("POST", "/api/v1/namespaces/default/pods/%s/eviction" % victim["metadata"]["name"],
                                    "", 201, "admin", "test", 1.0, "create")
    views[2].reboot()
    wait_for(lambda: store.get("nodes", "gpu-2")["status"]["nodeInfo"]["bootID"] == views[2].boot_id(),
             what="new bootID posted")
    report = checker.check_state_dir(cluster.state_dir)
    assert report["evictions_admitted"] == 1 and report["pdb_violations"] == []
    assert report["reboots"]["gpu-2"]["api_boot_id_changes"] == 1
    assert "gpu-0" not in report["reboots"]


def test_plugin_crash_loops_with_driver_not_loaded_after_booting_without_the_module(make_cluster):
    views = gpu_nodes(1)
    cluster = make_cluster(views)
    store = cluster.store
    wait_for(lambda: allocatable_gpus(store, "gpu-0") == "8", what="GPUs registered")
    views[0].reboot(driver_version=None)
    wait_for(lambda: (plugin_pod(store, "gpu-0") or {}).get("status", {}).get("containerStatuses", [{}])[0]
             .get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff", what="plugin crash loop")
    log = store.pod_log_provider(PLUGIN_NAMESPACE, plugin_pod(store, "gpu-0")["metadata"]["name"], None, {})
    assert "Failed to initialize NVML: Driver Not Loaded." in log
    node = store.get("nodes", "gpu-0")
    assert allocatable_gpus(store, "gpu-0") == "0" and node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert "nvidia.com/gpu.product" not in node["metadata"]["labels"], "GFD labels go with the driver"
    views[0].reboot(driver_version="550.54.15")
    wait_for(lambda: allocatable_gpus(store, "gpu-0") == "8", timeout_s=15, what="plugin healthy after the fix")


def test_nvidia_smi_in_a_deployment_restarts_in_place_instead_of_spawning_pods(make_cluster):
    views = gpu_nodes(1, gpus=2)
    cluster = make_cluster(views)
    store = cluster.store
    looping = deployment("smi-loop", 1)
    looping["spec"]["template"]["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", "nvidia-smi -L"]
    store.create("deployments", looping, "default")
    status = wait_for(lambda: (lambda pods: len(pods) == 1 and pods[0]["status"].get("containerStatuses") and
                               pods[0]["status"]["containerStatuses"][0]["restartCount"] >= 2 and
                               pods[0]["status"]["containerStatuses"][0])(pods_of(store, "smi-loop")),
                      what="restarts of the one pod")
    assert status["lastState"]["terminated"]["reason"] == "Completed"
    assert len(pods_of(store, "smi-loop")) == 1 and pods_of(store, "smi-loop")[0]["status"]["phase"] == "Running"
    name = pods_of(store, "smi-loop")[0]["metadata"]["name"]
    assert store.pod_log_provider("default", name, None, {}).startswith("GPU 0: NVIDIA H100 80GB HBM3")
    assert views[0].commands_run[0] == ["nvidia-smi", "-L"]


def test_rollout_that_cannot_get_gpus_reports_progress_deadline_exceeded(make_cluster):
    cluster = make_cluster(gpu_nodes(1, gpus=2))
    store = cluster.store
    stuck = deployment("stuck", 2, gpus_per_pod=2)
    stuck["spec"]["progressDeadlineSeconds"] = 1
    store.create("deployments", stuck, "default")

    def progressing():
        conditions = store.get("deployments", "stuck", "default")["status"].get("conditions") or []
        return next((c for c in conditions if c["type"] == "Progressing" and c["status"] == "False"), None)
    condition = wait_for(progressing, what="ProgressDeadlineExceeded")
    assert condition["reason"] == "ProgressDeadlineExceeded"
    assert condition["message"].endswith("has timed out progressing.")
    assert len(running_pods(store, "stuck")) == 1


def test_clearing_every_cluster_fault_of_a_healthy_node_changes_nothing(make_cluster):
    cluster = make_cluster(gpu_nodes(1), api_only=2)
    store = cluster.store
    wait_for(lambda: allocatable_gpus(store, "gpu-0") == "8", what="GPUs registered")
    plugin = plugin_pod(store, "gpu-0")["metadata"]["name"]
    log_before = store.pod_log_provider(PLUGIN_NAMESPACE, plugin, None, {})
    for kind in ("stale-device-plugin", "kubelet-restart", "device-plugin-crash", "pdb-block", "kubelet-down"):
        cluster.clear_fault("gpu-0", kind)
        cluster.clear_fault("api-gpu-0001", kind)
    time.sleep(0.5)
    assert allocatable_gpus(store, "gpu-0") == "8" and ready_status(store, "api-gpu-0001") == "True"
    assert store.pod_log_provider(PLUGIN_NAMESPACE, plugin, None, {}) == log_before
    with pytest.raises(ValueError, match="api-only node api-gpu-0001 has no kubelet or device plugin"):
        cluster.apply_fault("api-gpu-0001", "device-plugin-crash")


def test_api_only_node_goes_not_ready_under_kubelet_down_and_back(make_cluster):
    cluster = make_cluster([], api_only=3)
    store = cluster.store
    cluster.apply_fault("api-gpu-0002", "kubelet-down")
    wait_for(lambda: ready_status(store, "api-gpu-0002") == "Unknown", what="api-only node NotReady")
    wait_for(lambda: {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"} in
             (store.get("nodes", "api-gpu-0002")["spec"].get("taints") or []), what="unreachable taint")
    assert ready_status(store, "api-gpu-0001") == "True"
    cluster.clear_fault("api-gpu-0002", "kubelet-down")
    wait_for(lambda: ready_status(store, "api-gpu-0002") == "True", what="Ready again")
