"""Change kind `mig_layout` (docs/change_mig_layout.md): a MIG layout applied per GPU pool through the change engine.

In process first: the twin's kubelet ledger follows a new layout as a real kubelet does - the plugin restarted after
`nvidia-smi mig` registers the new profiles, a profile the layout dropped keeps its capacity with 0 allocatable for
the kubelet's stop grace period (endpointStopGracePeriod, 5 min; shortened here), then leaves the Node.
"""
from __future__ import annotations

import time

from gpulab.kube.sim.deviceplugin import NAMESPACE as PLUGIN_NAMESPACE
from gpulab.kube.testing import FakeNodeView, make_gpus, wait_for
from test_kube_cluster_controllers import make_cluster, plugin_pod  # noqa: F401 (make_cluster: a fixture)


def _status(store, node):
    status = store.get("nodes", node)["status"]
    return ({name: value for name, value in status["capacity"].items() if name.startswith("nvidia.com/")},
            {name: value for name, value in status["allocatable"].items() if name.startswith("nvidia.com/")})


def test_a_profile_the_new_layout_drops_leaves_the_node_after_the_kubelets_grace(make_cluster):
    view = FakeNodeView("gpu-0", gpus=make_gpus(2, mig_profiles=["3g.40gb", "3g.40gb"]))
    cluster = make_cluster([view], mig_strategy="mixed")
    store = cluster.store
    wait_for(lambda: _status(store, "gpu-0")[1].get("nvidia.com/mig-3g.40gb") == "4", what="the first layout")
    cluster.config.plugin_stop_grace_s = 3.0
    view.set_gpus(make_gpus(2, mig_profiles=["1g.10gb"] * 7), notify=False)
    store.delete("pods", plugin_pod(store, "gpu-0")["metadata"]["name"], PLUGIN_NAMESPACE)
    wait_for(lambda: _status(store, "gpu-0")[1].get("nvidia.com/mig-1g.10gb") == "14", what="the new layout")
    capacity, allocatable = _status(store, "gpu-0")
    # within the grace: the old profile is still in capacity, none of it allocatable
    assert capacity["nvidia.com/mig-3g.40gb"] == "4" and allocatable["nvidia.com/mig-3g.40gb"] == "0", (capacity,
                                                                                                      allocatable)
    started = time.monotonic()
    wait_for(lambda: "nvidia.com/mig-3g.40gb" not in _status(store, "gpu-0")[0], what="the old profile gone")
    assert time.monotonic() - started < 6
    capacity, allocatable = _status(store, "gpu-0")
    assert capacity == {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "14"}, capacity
    assert allocatable == capacity


def test_the_single_strategy_plugin_refuses_two_profiles_and_takes_one(make_cluster):
    """The plugin's device map with the single strategy: every MIG device of one type, none beside a whole GPU; a
    plugin started on another layout crash-loops with its error, one started on a uniform layout registers the MIG
    devices as nvidia.com/gpu."""
    view = FakeNodeView("gpu-0", gpus=make_gpus(2))
    cluster = make_cluster([view], mig_strategy="single")
    store = cluster.store
    wait_for(lambda: _status(store, "gpu-0")[1].get("nvidia.com/gpu") == "2", what="two whole GPUs")
    view.set_gpus(make_gpus(2, mig_profiles=["3g.40gb", "1g.10gb"]), notify=False)
    store.delete("pods", plugin_pod(store, "gpu-0")["metadata"]["name"], PLUGIN_NAMESPACE)
    pod = wait_for(lambda: (plugin_pod(store, "gpu-0") or {}).get("status", {}).get("containerStatuses")
                   and plugin_pod(store, "gpu-0")["status"]["containerStatuses"][0]["state"].get("waiting")
                   and plugin_pod(store, "gpu-0"), what="the plugin crash-looping")
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    log = cluster.logs.get(PLUGIN_NAMESPACE, pod["metadata"]["name"]) or ""
    assert "invalid MIG configuration: more than one MIG device type present on node" in log, log
    wait_for(lambda: _status(store, "gpu-0")[1]["nvidia.com/gpu"] == "0", what="no GPU allocatable")
    view.set_gpus(make_gpus(2, mig_profiles=["1g.10gb"] * 7), notify=False)
    wait_for(lambda: _status(store, "gpu-0")[1].get("nvidia.com/gpu") == "14", what="the uniform layout registered")
