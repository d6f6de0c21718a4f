"""Benchmark (not a test): drain of a node with 110 pods under PodDisruptionBudgets, gpuops.nvidia.node_drain vs
kubectl drain, side by side on one fleet twin.

    PYTHONPATH=lab ANSIBLE_COLLECTIONS_PATH=$TREE .venv/bin/python benchmarks/gates_drain.py [--rounds N]

Scenario (the same before each drain): 10 Deployments filling the target node to 110 pods (the kubelet's default pod
limit; pods already on the node count), each Deployment under a PDB with maxUnavailable 1, so every
Deployment can lose only one pod at a time and each eviction waits for a replacement to run on another node.
Measured per tool: wall time of the drain command, and the API requests the twin recorded from that client (its
user agent) during the drain. node_drain runs through ``ansible`` (ad hoc, one task): its wall time includes
Ansible's start-up; the module's own ``elapsed`` is reported too. Writes benchmarks/results/gates_drain.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results")
KUBECTL = "/usr/bin/kubectl"
TARGET = "api-gpu-0001"
NAMESPACE = "bench"
DEPLOYMENTS = 10
PODS_ON_NODE = 110
GRACE_S = 0
KUBECTL_AGENT = "kubectl"
PYTHON_CLIENT_AGENT = "gpuops.nvidia"   # _k8s_client puts the collection first in the user agent


def run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, check=True, **kwargs)


class Twin:
    def __init__(self, state_dir):
        self.state_dir = state_dir
        self.kubeconfig = os.path.join(state_dir, "kubeconfig")
        self.env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "lab"))

    def gpulab(self, *args):
        return run([sys.executable, "-m", "gpulab", args[0], "--state-dir", self.state_dir] + list(args[1:]),
                   env=self.env, timeout=300)

    def kubectl(self, *args, stdin=None, check=True):
        done = subprocess.run([KUBECTL, "--kubeconfig", self.kubeconfig] + list(args), input=stdin,
                              capture_output=True, text=True, timeout=600)
        if check and done.returncode != 0:
            raise RuntimeError("kubectl %s: %s%s" % (" ".join(args), done.stdout, done.stderr))
        return done

    def get(self, *args):
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def requests(self, since, until, agent):
        found = []
        with open(os.path.join(self.state_dir, "kube-records.jsonl")) as handle:
            for line in handle:
                if '"record":"request"' not in line:
                    continue
                record = json.loads(line)
                if since <= record["ts"] <= until and (record.get("user_agent") or "").startswith(agent):
                    found.append(record)
        return found


def workload(node_pods_now):
    """10 Deployments filling the target node to PODS_ON_NODE pods, each with a maxUnavailable-1 PDB."""
    total = PODS_ON_NODE - node_pods_now
    objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}]
    for index in range(DEPLOYMENTS):
        replicas = total // DEPLOYMENTS + (1 if index < total % DEPLOYMENTS else 0)
        labels = {"app": "svc-%d" % index}
        objects.append({"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": "svc-%d" % index, "namespace": NAMESPACE},
                        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                                 "template": {"metadata": {"labels": labels},
                                              "spec": {"terminationGracePeriodSeconds": GRACE_S,
                                                       "containers": [{"name": "app",
                                                                       "image": "registry.k8s.io/pause:3.10"}]}}}})
        objects.append({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                        "metadata": {"name": "svc-%d" % index, "namespace": NAMESPACE},
                        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}})
    return objects, total


def wait_for(check, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise RuntimeError("timed out waiting for " + what)


def setup(twin, nodes):
    """Fresh workload, all of it running on TARGET."""
    twin.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true")
    twin.kubectl("uncordon", TARGET)
    others = [name for name in nodes if name != TARGET]
    twin.kubectl("cordon", *others)
    node_pods = len(twin.get("pods", "-A", "--field-selector", "spec.nodeName=" + TARGET)["items"])
    objects, total = workload(node_pods)
    twin.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))

    def all_running():
        pods = twin.get("pods", "-n", NAMESPACE)["items"]
        return len([pod for pod in pods if pod["status"].get("phase") == "Running"
                    and pod["spec"].get("nodeName") == TARGET]) == total
    wait_for(all_running, 300, "%d pods running on %s" % (total, TARGET))
    twin.kubectl("uncordon", *others)
    wait_for(lambda: all(pdb["status"].get("disruptionsAllowed") == 1
                         for pdb in twin.get("pdb", "-n", NAMESPACE)["items"]), 60, "PDBs allowing 1")
    return total


def drain_with_kubectl(twin):
    started_ts, started = time.time(), time.monotonic()
    twin.kubectl("drain", TARGET, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=600s")
    wall = time.monotonic() - started
    time.sleep(1.0)
    return {"wall_s": round(wall, 2), "requests": twin.requests(started_ts, started_ts + wall + 0.5, KUBECTL_AGENT)}


def drain_with_node_drain(twin):
    args = json.dumps({"name": TARGET, "kubeconfig": twin.kubeconfig, "timeout": 600})
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    started_ts, started = time.time(), time.monotonic()
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-m",
                           "gpuops.nvidia.node_drain", "-a", args], env=env, timeout=900, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError("node_drain failed: %s%s" % (done.stdout, done.stderr))
    wall = time.monotonic() - started
    time.sleep(1.0)
    result = json.loads(done.stdout.split("=>", 1)[1])
    return {"wall_s": round(wall, 2), "module_elapsed_s": result["elapsed"], "evicted": len(result["evicted"]),
            "requests": twin.requests(started_ts, started_ts + wall + 1.0, PYTHON_CLIENT_AGENT)}


def summarize(requests):
    by_kind = {}
    for record in requests:
        kind = "%s %s" % (record["method"], "eviction" if record["path"].endswith("/eviction") else
                          ("watch" if "watch=" in (record.get("query") or "") else record.get("verb") or ""))
        by_kind[kind] = by_kind.get(kind, 0) + 1
    return {"total": len(requests), "evictions_429": len([r for r in requests if r["code"] == 429]),
            "by_kind": dict(sorted(by_kind.items()))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="drains per tool (alternating)")
    parser.add_argument("--keep", action="store_true", help="leave the twin running")
    args = parser.parse_args()
    if not os.environ.get("ANSIBLE_COLLECTIONS_PATH"):
        sys.exit("set ANSIBLE_COLLECTIONS_PATH to a folder with ansible_collections/gpuops/nvidia (make tree)")
    state_dir = os.path.join(tempfile.mkdtemp(prefix="gates-drain-bench-"), "state")
    twin = Twin(state_dir)
    twin.gpulab("up", "--nodes", "1", "--api-only", "4", "--boot-delay", "0.3")
    rounds = []
    try:
        nodes = [node["metadata"]["name"] for node in twin.get("nodes")["items"]]
        for round_index in range(args.rounds):
            for tool, drain in (("kubectl drain", drain_with_kubectl), ("node_drain", drain_with_node_drain)):
                pods = setup(twin, nodes)
                measured = drain(twin)
                measured["requests"] = summarize(measured["requests"])
                rounds.append(dict(measured, tool=tool, round=round_index + 1, workload_pods=pods))
                print(json.dumps(rounds[-1]), flush=True)
    finally:
        if not args.keep:
            twin.gpulab("down")
    write_results(rounds)


def write_results(rounds):
    kubectl_runs = [r for r in rounds if r["tool"] == "kubectl drain"]
    ours = [r for r in rounds if r["tool"] == "node_drain"]

    def mean(values):
        return round(sum(values) / len(values), 2)
    summary = {
        "kubectl_wall_s": mean([r["wall_s"] for r in kubectl_runs]),
        "node_drain_wall_s": mean([r["wall_s"] for r in ours]),
        "node_drain_module_elapsed_s": mean([r["module_elapsed_s"] for r in ours]),
        "kubectl_requests": mean([r["requests"]["total"] for r in kubectl_runs]),
        "node_drain_requests": mean([r["requests"]["total"] for r in ours]),
    }
    summary["wall_ratio"] = round(summary["node_drain_wall_s"] / summary["kubectl_wall_s"], 3)
    summary["requests_ratio"] = round(summary["node_drain_requests"] / summary["kubectl_requests"], 3)
    kubectl_version = run([KUBECTL, "version", "--client", "-o", "json"]).stdout
    report = {"benchmark": "gates_drain", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "load_avg_1m_at_end": os.getloadavg()[0],
                          "kubectl": json.loads(kubectl_version)["clientVersion"]["gitVersion"]},
              "scenario": {"pods_on_node": PODS_ON_NODE, "deployments": DEPLOYMENTS, "pdb": "maxUnavailable 1 each",
                           "grace_period_s": GRACE_S, "goal": "wall <= 1.0x kubectl, requests <= 1.2x kubectl"},
              "summary": summary, "rounds": rounds}
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "gates_drain.json"), "w") as handle:
        json.dump(report, handle, indent=2)
    lines = ["# Drain of a node with 110 pods under PDBs: node_drain vs kubectl drain", "",
             "Generated by `benchmarks/gates_drain.py` on %s (%d CPUs, load %.1f at the end, kubectl %s)."
             % (report["when"], report["machine"]["cpus"], report["machine"]["load_avg_1m_at_end"],
                report["machine"]["kubectl"]), "",
             "Scenario: %d Deployments on one node (%d pods on it in all), each under a PDB with maxUnavailable 1; "
             "replacements run on 4 other nodes of the twin (`--api-only` nodes)." % (DEPLOYMENTS, PODS_ON_NODE), "",
             "| tool | round | wall s | module elapsed s | API requests | 429 answers | requests by kind |",
             "|---|---|---|---|---|---|---|"]
    for r in rounds:
        lines.append("| %s | %d | %.2f | %s | %d | %d | %s |" % (
            r["tool"], r["round"], r["wall_s"], r.get("module_elapsed_s", "-"), r["requests"]["total"],
            r["requests"]["evictions_429"], ", ".join("%s: %d" % item for item in r["requests"]["by_kind"].items())))
    lines += ["", "node_drain / kubectl: wall **%.2fx** (goal <= 1.0), requests **%.2fx** (goal <= 1.2); the wall time "
              "of node_drain includes Ansible's start-up (module alone: %.2f s)."
              % (summary["wall_ratio"], summary["requests_ratio"], summary["node_drain_module_elapsed_s"]), ""]
    with open(os.path.join(RESULTS, "gates_drain.md"), "w") as handle:
        handle.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
