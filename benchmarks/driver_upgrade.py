"""Benchmark (not a test): the driver upgrade runbook on a fleet twin with fixed step times, its wall time against
the floor of the steps themselves, and where Ansible's own time goes.

    PYTHONPATH=lab ANSIBLE_COLLECTIONS_PATH=$TREE PATH=$PWD/.venv/bin:$PATH \\
        .venv/bin/python benchmarks/driver_upgrade.py --label after [--nodes 16] [--mitogen DIR]
    .venv/bin/python benchmarks/driver_upgrade.py --report      # only rewrite the markdown from the JSON

One run: a fresh twin of N H100 nodes on 595.91.07 with fixed step times (boot delay, runfile install time, and a
pod per node whose shutdown takes a fixed time, so the drain has one); `gpuops.nvidia.driver_upgrade` to 615.71.09,
confirmed, default batches (canary, then 25 %), a fixed soak without Prometheus. Measured:
- wall: the ansible-playbook process, start to exit.
- floor: the sum over batches of the slowest node's drain + install + reboot + verify, plus the batch's soak, each
  from the twin's own records: drain = the node's cordon to its last evicted pod gone (API change records);
  install = the runfile's own run (its manifest: start and duration); reboot = the reboot request to the node up
  again (node events); verify = up to the API showing the node Ready with allocatable = capacity and the target's
  driver label, plus the smoke pod's run (created to Succeeded); soak = the configured seconds (a timed wait).
- Ansible's overhead: (wall - floor) per batch, and inside each batch (batch wall from the task timeline minus the
  batch's floor); the per-task profile from a benchmark-only callback (benchmarks/callback_plugins/bench_timeline.py,
  ansible.posix.profile_tasks-like timing per task and host).
Each run is stored under its --label in benchmarks/results/driver_upgrade.json with the machine, load and versions;
the markdown puts the labels side by side. --mitogen DIR: run with the mitogen_linear strategy from DIR (a
`pip install --target DIR mitogen==0.3.54`, never a dependency of the collection).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")

FROM, TO = "595.91.07", "615.71.09"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
NAMESPACE = "bench"
KUBECTL = "/usr/bin/kubectl"


# --------------------------------------------------------------------------- the twin and the run

def workload_manifest(nodes, stop_s):
    """One Deployment per node, pinned to it, whose pod takes stop_s to stop after SIGTERM: the drain's fixed time."""
    script = "trap 'sleep %s; exit 0' TERM; while :; do sleep 1 & wait $!; done" % stop_s
    items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}]
    for node in nodes:
        items.append({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "work-" + node, "namespace": NAMESPACE},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "work-" + node}},
                     "template": {"metadata": {"labels": {"app": "work-" + node}},
                                  "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                           "terminationGracePeriodSeconds": int(stop_s) + 30,
                                           "containers": [{"name": "work", "image": "busybox",
                                                           "command": ["sh", "-c", script]}]}}}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def kubectl(lab, *args, stdin=None):
    done = subprocess.run([KUBECTL, "--kubeconfig", os.path.join(lab.state_dir, "kubeconfig")] + list(args),
                          input=stdin, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError("kubectl %s: %s" % (" ".join(args), done.stderr))
    return done.stdout


def start_workload(lab, nodes, stop_s):
    kubectl(lab, "apply", "-f", "-", stdin=json.dumps(workload_manifest(nodes, stop_s)))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        pods = json.loads(kubectl(lab, "get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]
        running = {pod["spec"].get("nodeName") for pod in pods if (pod.get("status") or {}).get("phase") == "Running"}
        if running >= set(nodes):
            return
        time.sleep(1)
    raise RuntimeError("the workload pods did not all run")


def playbook_env(lab, args, timeline):
    env = dict(lab.env, ANSIBLE_HOST_KEY_CHECKING="false", ANSIBLE_DEPRECATION_WARNINGS="false",
               ANSIBLE_CALLBACK_PLUGINS=os.path.join(HERE, "callback_plugins"),
               ANSIBLE_CALLBACKS_ENABLED=",".join(["bench_timeline"] + args.callbacks),
               BENCH_TIMELINE=timeline, ANSIBLE_FORKS=str(args.forks))
    if args.mitogen:
        env["ANSIBLE_STRATEGY_PLUGINS"] = os.path.join(args.mitogen, "ansible_mitogen", "plugins", "strategy")
        env["ANSIBLE_STRATEGY"] = "mitogen_linear"
        env["PYTHONPATH"] = os.pathsep.join([args.mitogen, env.get("PYTHONPATH", "")])
    return env


def run_upgrade(lab, args, work_dir):
    timeline = os.path.join(work_dir, "timeline.jsonl")
    extra = {"gpuops_driver_version": TO, "gpuops_confirm": "gpulab", "gpuops_run_id": "bench",
             "gpuops_soak_seconds": {"canary": args.soak_canary, "batch": args.soak_batch},
             "gpuops_max_unavailable": "25%", "gpuops_run_record_dir": work_dir,
             "gpuops_reboot_timeout": 300, "gpuops_ready_timeout": 300, "gpuops_drain_timeout": 300,
             "precheck_require_kubelet": False,
             "nvidia_driver_runfile_src": os.path.join(lab.state_dir, "runfiles",
                                                       "NVIDIA-Linux-x86_64-{{ nvidia_driver_version }}.run")}
    argv = ["ansible-playbook", "-i", os.path.join(lab.state_dir, "inventory.yml"), "gpuops.nvidia.driver_upgrade",
            "-e", json.dumps(extra)]
    load_before = os.getloadavg()
    started = time.time()
    done = subprocess.run(argv, capture_output=True, text=True, env=playbook_env(lab, args, timeline),
                          timeout=3600)
    ended = time.time()
    with open(os.path.join(work_dir, "ansible.log"), "w") as stream:
        stream.write(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError("driver_upgrade failed (%d), see %s/ansible.log:\n%s"
                           % (done.returncode, work_dir, (done.stdout + done.stderr)[-3000:]))
    with open(os.path.join(work_dir, "driver-upgrade-bench.json")) as stream:
        run_record = json.load(stream)
    return {"started": started, "ended": ended, "load_before": load_before, "load_after": os.getloadavg(),
            "run_record": run_record, "timeline": read_jsonl(timeline), "output": done.stdout}


def read_jsonl(path):
    with open(path) as stream:
        return [json.loads(line) for line in stream if line.strip()]


# --------------------------------------------------------------------------- the floor, from the twin's records

def node_ready_with_gpus(node):
    status = node.get("status") or {}
    ready = any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in status.get("conditions") or [])
    gpus = (status.get("allocatable") or {}).get("nvidia.com/gpu")
    return ready and gpus not in (None, "0") and gpus == (status.get("capacity") or {}).get("nvidia.com/gpu") and \
        ((node.get("metadata") or {}).get("labels") or {}).get(DRIVER_LABEL) == TO


def step_times(lab, node, since):
    """drain, install, reboot, verify seconds of one node's maintenance, from the twin's records."""
    changes = [record for record in read_jsonl(os.path.join(lab.state_dir, "kube-records.jsonl"))
               if record.get("record") == "change" and record["ts"] >= since]
    events = [event for event in lab.events(since=since) if event.get("node") == node]
    cordoned = next(r["ts"] for r in changes if r["resource"] == "nodes" and r["name"] == node
                    and (r["object"].get("spec") or {}).get("unschedulable"))
    evicted = [r["ts"] for r in changes if r["resource"] == "pods" and r["event"] == "DELETED"
               and r.get("namespace") == NAMESPACE and (r["object"].get("spec") or {}).get("nodeName") == node]
    drain = (max(evicted) - cordoned) if evicted else 0.0
    with open(os.path.join(lab.state_dir, "nodes", node, "tmpfs", "upper", "var", "lib", "nvidia",
                           "manifest.json")) as stream:
        manifest = json.load(stream)
    install = float(manifest["install_s"])
    requested = next(e["ts"] for e in events if e["kind"] == "power-request")
    up = next(e["ts"] for e in events if e["kind"] == "up" and e["ts"] > requested)
    back = next(r["ts"] for r in changes if r["resource"] == "nodes" and r["name"] == node and r["ts"] > up
                and node_ready_with_gpus(r["object"]))
    smoke = [r for r in changes if r["resource"] == "pods" and (r.get("name") or "").startswith("gpuops-smoke-")
             and (r["object"].get("spec") or {}).get("nodeName") == node]
    smoke_s = 0.0
    if smoke:
        created = min(r["ts"] for r in smoke)
        succeeded = min(r["ts"] for r in smoke if (r["object"].get("status") or {}).get("phase") == "Succeeded")
        smoke_s = succeeded - created
    return {"drain": round(drain, 3), "install": round(install, 3), "reboot": round(up - requested, 3),
            "verify": round(back - up + smoke_s, 3)}


def floor_of(lab, run, soak):
    batches = run["run_record"]["plan"]["batches"]
    per_batch = []
    for index, batch in enumerate(batches):
        steps = {node: step_times(lab, node, run["started"]) for node in batch["nodes"]}
        slowest = max(steps, key=lambda node: sum(steps[node].values()))
        soak_s = 0 if index == len(batches) - 1 else soak[batch["kind"]]
        per_batch.append({"index": index + 1, "kind": batch["kind"], "nodes": batch["nodes"], "steps": steps,
                          "slowest": slowest, "slowest_s": round(sum(steps[slowest].values()), 3), "soak_s": soak_s,
                          "floor_s": round(sum(steps[slowest].values()) + soak_s, 3)})
    return per_batch


# --------------------------------------------------------------------------- where Ansible's time goes

def task_profile(timeline, ended):
    """Each task's span (its start to the next task's or play's start), summed by task name, with how many hosts
    it ran on and whether it ran on the nodes or on the controller."""
    marks = [record for record in timeline if record["kind"] in ("task", "play", "end")]
    hosts = {}
    for record in timeline:
        if record["kind"] == "result" and record["status"] != "skipped":
            hosts.setdefault(record["uuid"], set()).add(record["host"])
    profile = {}
    for mark, following in zip(marks, marks[1:] + [{"ts": ended}]):
        if mark["kind"] != "task":
            continue
        entry = profile.setdefault(mark["name"], {"task": mark["name"], "action": mark["action"], "runs": 0,
                                                 "total_s": 0.0, "host_results": 0})
        entry["runs"] += 1
        entry["total_s"] += following["ts"] - mark["ts"]
        entry["host_results"] += len(hosts.get(mark["uuid"], ()))
    rows = sorted(profile.values(), key=lambda row: -row["total_s"])
    for row in rows:
        row["total_s"] = round(row["total_s"], 2)
    return rows


def batch_spans(timeline, ended, count):
    """[start, end) of each batch: from its play start (each serial batch starts the upgrade play again, fact
    gathering included) to the next one's (the last: the finish play)."""
    plays = [record["ts"] for record in timeline if record["kind"] == "play"
             and record["name"].startswith("Upgrade the GPU nodes")]
    finish = next((record["ts"] for record in timeline if record["kind"] == "play"
                   and record["name"].startswith("Release the lock")), ended)
    starts = plays[:count]
    return [(start, (starts[index + 1] if index + 1 < len(starts) else finish)) for index, start in enumerate(starts)]


def module_tasks_between(timeline, start, end):
    """How many tasks started in [start, end) ran a module on some host (on a node over SSH, or a Kubernetes module
    on the controller): skipped tasks, includes, set_fact/assert and pauses left out. Each costs about a process
    start and a round trip per host, which bounds Ansible's overhead from below."""
    ran = set(record["uuid"] for record in timeline if record["kind"] == "result" and record["status"] != "skipped")
    return sum(1 for record in timeline if record["kind"] == "task" and start <= record["ts"] < end
               and record["uuid"] in ran and category_of(record["action"]) in (
                   "Kubernetes modules on the controller", "modules on the nodes (over SSH)"))


def set_batch_walls(measured, timeline, ended):
    """Each batch's wall time and overhead (wall - floor), and the time outside the batches."""
    spans = batch_spans(timeline, ended, len(measured["per_batch"]))
    for batch, (start, end) in zip(measured["per_batch"], spans):
        batch["wall_s"] = round(end - start, 2)
        batch["overhead_s"] = round(end - start - batch["floor_s"], 2)
        batch["module_tasks"] = module_tasks_between(timeline, start, end)
    measured["in_batch_overhead_s"] = [batch["overhead_s"] for batch in measured["per_batch"]]
    measured["outside_batches_s"] = round(measured["wall_s"] - sum(end - start for start, end in spans), 2)


# the collection's Kubernetes modules: they run on the controller (delegate_to: localhost), one python + kubernetes
# client start per task and node
CONTROLLER_MODULES = ("driver_upgrade_plan", "node_upgrade_record", "node_drain", "gpu_allocatable_wait",
                      "gpu_smoke_test", "rollout_lock", "rollout_batch_gate", "device_plugin_restart",
                      "pods_completion_wait", "prometheus_gate")


def category_of(action):
    if action in ("ansible.builtin.gather_facts", "gather_facts", "ansible.builtin.setup"):
        return "fact gathering"
    if action.startswith("ansible.builtin.include") or action.startswith("include") or action in (
            "ansible.builtin.set_fact", "ansible.builtin.assert", "ansible.builtin.debug", "ansible.builtin.fail",
            "ansible.builtin.meta", "ansible.builtin.add_host", "ansible.builtin.validate_argument_spec",
            "ansible.builtin.include_vars"):
        return "controller-side tasks (set_fact, assert, include, ...)"
    if action == "ansible.builtin.pause":
        return "soak (pause)"
    if action.rsplit(".", 1)[-1] in CONTROLLER_MODULES:
        return "Kubernetes modules on the controller"
    return "modules on the nodes (over SSH)"


def categories_of(profile):
    categories = {}
    for row in profile:
        name = category_of(row["action"])
        categories[name] = round(categories.get(name, 0.0) + row["total_s"], 2)
    return categories


# --------------------------------------------------------------------------- one measurement

def git(*args):
    return subprocess.run(["git", "-C", REPO] + list(args), capture_output=True, text=True).stdout.strip()


def versions(args):
    import ansible
    found = {"ansible-core": ansible.__version__, "python": platform.python_version(),
             "kubectl": json.loads(subprocess.run([KUBECTL, "version", "--client", "-o", "json"], capture_output=True,
                                                  text=True).stdout)["clientVersion"]["gitVersion"]}
    if args.mitogen:
        sys.path.insert(0, args.mitogen)
        import mitogen
        found["mitogen"] = ".".join(str(part) for part in mitogen.__version__)
    return found


def slug(text):
    """A folder name from a label (the twin's ssh settings do not take spaces)."""
    return "".join(char if char.isalnum() or char in "-_." else "-" for char in text)


def measure(args):
    from gpulab.testkit.lab import start_lab, stop_lab   # the twin only when measuring (--report reads the JSON)
    work_dir = os.path.join(args.work_dir, slug(args.label))
    os.makedirs(work_dir, exist_ok=True)
    state_dir = os.path.join(work_dir, "state")
    lab = start_lab(state_dir, "--nodes", str(args.nodes), "--driver", FROM, "--runfile", FROM,
                    "--boot-delay", str(args.boot_delay), "--install-seconds", str(args.install_seconds))
    try:
        node_names = ["gpu-node-%02d" % (index + 1) for index in range(args.nodes)]
        start_workload(lab, node_names, args.drain_seconds)
        time.sleep(2)
        run = run_upgrade(lab, args, work_dir)
        soak = {"canary": args.soak_canary, "batch": args.soak_batch}
        batches = floor_of(lab, run, soak)
    finally:
        stop_lab(lab)
    wall = run["ended"] - run["started"]
    floor = sum(batch["floor_s"] for batch in batches)
    profile = task_profile(run["timeline"], run["ended"])
    measured = {
        "label": args.label, "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": args.commit or git("rev-parse", "--short", "HEAD"),
        "dirty": not args.commit and bool(git("status", "--porcelain", "--", "playbooks", "plugins", "roles")),
        "strategy": "mitogen_linear" if args.mitogen else "linear",
        "machine": {"host": platform.node(), "cpus": os.cpu_count(),
                    "load_avg_before": [round(x, 2) for x in run["load_before"]],
                    "load_avg_after": [round(x, 2) for x in run["load_after"]]},
        "versions": versions(args),
        "twin": {"nodes": args.nodes, "boot_delay_s": args.boot_delay, "install_s": args.install_seconds,
                 "pod_stop_s": args.drain_seconds, "soak_s": soak, "forks": args.forks},
        "wall_s": round(wall, 2), "floor_s": round(floor, 2), "ratio": round(wall / floor, 3),
        "batches": len(batches), "overhead_per_batch_s": round((wall - floor) / len(batches), 2),
        "per_batch": batches, "task_profile": profile,
        "tasks_run": sum(row["runs"] for row in profile), "started_ts": run["started"], "ended_ts": run["ended"],
    }
    set_batch_walls(measured, run["timeline"], run["ended"])
    return measured


# --------------------------------------------------------------------------- results

def load_results(path):
    if os.path.exists(path):
        with open(path) as stream:
            return json.load(stream)
    return {"runs": {}}


def write_markdown(results, path):
    runs = results["runs"]
    lines = ["# driver_upgrade benchmark", "",
             "Generated by `benchmarks/driver_upgrade.py` (a benchmark, not a test). `driver_upgrade.yml` "
             "(595.91.07 -> 615.71.09, confirmed, batches canary then 25 %, max unavailable 25 %) on fleet twins "
             "with fixed step times; each column is one run on a fresh twin. Floor = the sum over batches of the "
             "slowest node's drain + install + reboot + verify (from the twin's records) + the batch's soak. "
             "Goals: wall/floor <= 1.3, Ansible's overhead <= 10 s per batch.", "",
             "| | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]

    def row(title, render):
        lines.append("| %s | %s |" % (title, " | ".join(render(run) for run in runs.values())))

    row("when (UTC)", lambda r: r["when"])
    row("commit", lambda r: r["commit"] + (" (+uncommitted)" if r["dirty"] else ""))
    row("strategy", lambda r: r["strategy"] + (" (mitogen %s)" % r["versions"]["mitogen"]
                                               if "mitogen" in r["versions"] else ""))
    row("nodes / batches", lambda r: "%d / %d" % (r["twin"]["nodes"], r["batches"]))
    row("load avg 1/5/15 min before", lambda r: "/".join("%.2f" % x for x in r["machine"]["load_avg_before"]))
    row("load avg 1/5/15 min after", lambda r: "/".join("%.2f" % x for x in r["machine"]["load_avg_after"]))
    row("**wall s**", lambda r: "**%.1f**" % r["wall_s"])
    row("**floor s**", lambda r: "**%.1f**" % r["floor_s"])
    row("**wall / floor** (goal <= 1.3)", lambda r: "**%.2f**" % r["ratio"])
    row("**overhead per batch s** ((wall - floor) / batches, goal <= 10)", lambda r: "**%.1f**" % r["overhead_per_batch_s"])
    row("overhead inside each batch s", lambda r: ", ".join("%.1f" % x for x in r["in_batch_overhead_s"]))
    row("outside the batches s (plan, pre-check, lock, finish)", lambda r: "%.1f" % r["outside_batches_s"])
    row("tasks run", lambda r: str(r["tasks_run"]))
    row("tasks that ran a module, each batch (canary first)",
        lambda r: ", ".join(str(batch.get("module_tasks", "-")) for batch in r["per_batch"]))
    categories = {label: categories_of(run["task_profile"]) for label, run in runs.items()}
    for name in sorted({name for found in categories.values() for name in found}):
        row("time in %s s" % name, lambda r, name=name: "%.1f" % categories[r["label"]].get(name, 0.0))
    first = next(iter(runs.values()), None)
    if first:
        twin = first["twin"]
        lines += ["", "Fixed step times of the twin: boot delay %ss (`--boot-delay`), runfile install %ss "
                  "(`--install-seconds`), a pod per node that takes %ss to stop (the drain), soak %s; forks %s. "
                  "Versions: %s." % (twin["boot_delay_s"], twin["install_s"], twin["pod_stop_s"],
                                     json.dumps(twin["soak_s"]), twin["forks"],
                                     ", ".join("%s %s" % item for item in first["versions"].items()))]
    for label, run in runs.items():
        lines += ["", "## %s: per batch" % label, "",
                  "| batch | nodes | slowest node: drain + install + reboot + verify s | soak s | floor s | wall s | "
                  "overhead s |", "|---|---|---|---|---|---|---|"]
        for batch in run["per_batch"]:
            steps = batch["steps"][batch["slowest"]]
            lines.append("| %d (%s) | %d | %s: %.1f + %.1f + %.1f + %.1f | %s | %.1f | %.1f | %.1f |" % (
                batch["index"], batch["kind"], len(batch["nodes"]), batch["slowest"], steps["drain"],
                steps["install"], steps["reboot"], steps["verify"], batch["soak_s"], batch["floor_s"],
                batch["wall_s"], batch["overhead_s"]))
        lines += ["", "Task profile (the 15 costliest; a task's span is its start to the next task's, all hosts "
                  "of the batch in parallel):", "", "| task | action | runs | host results | total s |",
                  "|---|---|---|---|---|"]
        for task in run["task_profile"][:15]:
            lines.append("| %s | %s | %d | %d | %.1f |" % (task["task"].replace("|", "/"), task["action"],
                                                           task["runs"], task["host_results"], task["total_s"]))
    notes = results.get("notes") or []
    if notes:
        lines += ["", "## Notes", ""] + ["- " + note for note in notes]
    with open(path, "w") as stream:
        stream.write("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="run", help="name of this run in the results (e.g. before, after)")
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--boot-delay", type=float, default=5.0)
    parser.add_argument("--install-seconds", type=float, default=10.0)
    parser.add_argument("--drain-seconds", type=float, default=3.0, help="seconds each node's pod takes to stop")
    parser.add_argument("--soak-canary", type=int, default=10)
    parser.add_argument("--soak-batch", type=int, default=5)
    parser.add_argument("--forks", type=int, default=16)
    parser.add_argument("--callbacks", action="append", default=[], help="more callbacks to enable")
    parser.add_argument("--commit", help="the commit the collection tree under test was built from (default: HEAD)")
    parser.add_argument("--mitogen", metavar="DIR", help="a pip --target folder holding mitogen (mitogen_linear)")
    parser.add_argument("--work-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "bench-driver-upgrade"))
    parser.add_argument("--results", default=os.path.join(RESULTS, "driver_upgrade.json"))
    parser.add_argument("--report", action="store_true", help="only rewrite the markdown from the JSON")
    parser.add_argument("--respan", action="store_true",
                        help="recompute the batches' wall times of the stored runs from their timelines in --work-dir")
    args = parser.parse_args()
    if args.respan:
        results = load_results(args.results)
        for label, run in results["runs"].items():
            timeline = os.path.join(args.work_dir, slug(label), "timeline.jsonl")
            ended = run.get("ended_ts") or max(record["ts"] for record in read_jsonl(timeline))
            set_batch_walls(run, read_jsonl(timeline), ended)
        with open(args.results, "w") as stream:
            json.dump(results, stream, indent=1)
    if not args.report:
        if args.mitogen:
            args.mitogen = os.path.abspath(args.mitogen)
        measured = measure(args)
        with open(os.path.join(args.work_dir, slug(args.label), "measurement.json"), "w") as stream:
            json.dump(measured, stream, indent=1)
        results = load_results(args.results)      # read now: another run may have added its own meanwhile
        results["runs"][args.label] = measured
        os.makedirs(os.path.dirname(args.results), exist_ok=True)
        with open(args.results, "w") as stream:
            json.dump(results, stream, indent=1)
        print(json.dumps({key: measured[key] for key in ("label", "wall_s", "floor_s", "ratio", "overhead_per_batch_s",
                                                         "in_batch_overhead_s", "outside_batches_s")}))
    write_markdown(load_results(args.results), os.path.splitext(args.results)[0] + ".md")


if __name__ == "__main__":
    main()
