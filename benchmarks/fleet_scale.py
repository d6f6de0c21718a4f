"""Benchmark (not a test): what a driver roll-out costs the controller as the fleet grows, today's runbook and an
earlier one side by side, with the twin and the controller on different CPUs.

    PYTHONPATH=lab PATH=$PWD/.venv/bin:$PATH .venv/bin/python benchmarks/fleet_scale.py \\
        --nodes 8 16 32 64 --before 8aa5b0b [--after HEAD]
    .venv/bin/python benchmarks/fleet_scale.py --report      # only rewrite the markdown from the JSON
    .venv/bin/python benchmarks/fleet_scale.py --plan-nodes 1000    # the plan and the health check, API-only nodes

Each run: a fresh twin of N H100 nodes with fixed step times (benchmarks/driver_upgrade.py's: boot delay, install
time, a pod per node that takes a while to stop, fixed soaks), the runbook of one commit (its collection tree built
from `git archive`), confirmed, a 1-node canary then batches of 25 %. The twin (its daemon, nodes, API server,
exporters: every process this script starts) runs pinned to CPU 0 and `ansible-playbook` (with every process it
starts: forks, SSH clients, the Kubernetes modules) to CPU 1, so the controller's cost is neither hidden by nor
blamed on the simulated fleet. Measured per run:
- wall, floor (benchmarks/driver_upgrade.py's floor from the twin's records: the slowest node's steps of each batch
  plus its soak) and overhead per batch ((wall - floor) / batches);
- controller CPU seconds: the user + system time of the ansible-playbook process tree (its rusage, every child
  reaped), per node;
- Kubernetes module processes per batch: the results of the collection's controller modules in the batch's span;
- API requests per node (the API twin's records), and the controller's peak RSS (the process tree, sampled 4/s).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
sys.path.insert(0, HERE)

import driver_upgrade as bench  # noqa: E402  (the twin's workload, the floor, the task timeline)

CONTROLLER_MODULES = bench.CONTROLLER_MODULES + ("alertmanager_silence", "gpu_fleet_report")
TWIN_CPU, CONTROLLER_CPU = 0, 1


# --------------------------------------------------------------------------- the runbooks under test

def tree_of(commit, work_dir):
    """ANSIBLE_COLLECTIONS_PATH holding the collection as it was at ``commit`` (git archive, then the tree sync)."""
    sha = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", commit], capture_output=True, text=True,
                         check=True).stdout.strip()
    root = os.path.join(work_dir, "trees", sha)
    collection = os.path.join(root, "ansible_collections", "gpuops", "nvidia")
    if not os.path.isdir(collection):
        source = os.path.join(work_dir, "trees", sha + "-src")
        shutil.rmtree(source, ignore_errors=True)
        os.makedirs(source)
        archive = subprocess.run(["git", "-C", REPO, "archive", sha], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", source], input=archive, check=True)
        subprocess.run([sys.executable, os.path.join(REPO, "hack", "sync-tree.py"), source, collection], check=True,
                       capture_output=True)
    return sha, root


# --------------------------------------------------------------------------- the controller's own cost

def tree_rss_kib(root_pid):
    """Resident memory of a process and all its descendants (KiB), from /proc."""
    children, rss = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as stream:
                fields = stream.read().rsplit(")", 1)[1].split()
            with open("/proc/%s/statm" % entry) as stream:
                pages = int(stream.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = pages * os.sysconf("SC_PAGE_SIZE") // 1024
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


def run_playbook(lab, args, nodes, collections, work_dir):
    timeline = os.path.join(work_dir, "timeline.jsonl")
    extra = {"gpuops_driver_version": bench.TO, "gpuops_confirm": "gpulab", "gpuops_run_id": "bench",
             "gpuops_soak_seconds": {"canary": args.soak_canary, "batch": args.soak_batch},
             "gpuops_max_unavailable": "25%", "gpuops_run_record_dir": work_dir,
             "gpuops_reboot_timeout": 600, "gpuops_ready_timeout": 600, "gpuops_drain_timeout": 600,
             "precheck_require_kubelet": False,
             "nvidia_driver_runfile_src": os.path.join(lab.state_dir, "runfiles",
                                                       "NVIDIA-Linux-x86_64-{{ nvidia_driver_version }}.run")}
    args.forks = min(max(nodes, 5), 50)        # as the gpuops runner sets them
    env = dict(bench.playbook_env(lab, args, timeline), ANSIBLE_COLLECTIONS_PATH=collections,
               ANSIBLE_PIPELINING="true")
    argv = ["ansible-playbook", "-i", os.path.join(lab.state_dir, "inventory.yml"), "gpuops.nvidia.driver_upgrade",
            "-e", json.dumps(extra)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               preexec_fn=lambda: os.sched_setaffinity(0, {CONTROLLER_CPU}))
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.wait(0.25):
            peak[0] = max(peak[0], tree_rss_kib(process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = process.communicate(timeout=7200)
    ended = time.time()
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(os.path.join(work_dir, "ansible.log"), "w") as stream:
        stream.write(output)
    if process.returncode != 0:
        raise RuntimeError("driver_upgrade failed (%d), see %s/ansible.log:\n%s"
                           % (process.returncode, work_dir, output[-3000:]))
    with open(os.path.join(work_dir, "driver-upgrade-bench.json")) as stream:
        run_record = json.load(stream)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"started": started, "ended": ended, "run_record": run_record, "timeline": bench.read_jsonl(timeline),
            "controller_cpu_s": cpu, "controller_peak_rss_mib": round(peak[0] / 1024.0, 1)}


def module_processes_per_batch(timeline, spans):
    """Results of the collection's controller modules (one module process each) in each batch's span."""
    counts = []
    for start, end in spans:
        counts.append(sum(1 for record in timeline if record["kind"] == "result" and record["status"] != "skipped"
                          and start <= record["ts"] < end
                          and record["action"].rsplit(".", 1)[-1] in CONTROLLER_MODULES))
    return counts


def category_of(action):
    """bench.category_of with this benchmark's list of controller modules (the batch-level runbook's too)."""
    if action.rsplit(".", 1)[-1] in CONTROLLER_MODULES:
        return "Kubernetes modules on the controller"
    return bench.category_of(action)


def batch_breakdown(timeline, spans):
    """Where the wall of each batch goes: the tasks that started in its span, their spans (a task's start to the
    next task's) summed by category, and how many tasks ran a module on some host, per category."""
    ran = set(record["uuid"] for record in timeline if record["kind"] == "result" and record["status"] != "skipped")
    marks = [record for record in timeline if record["kind"] in ("task", "play", "end")]
    ended = timeline[-1]["ts"] if timeline else 0.0
    batches = []
    for start, end in spans:
        seconds, tasks = {}, {}
        for mark, following in zip(marks, marks[1:] + [{"ts": ended}]):
            if mark["kind"] != "task" or not start <= mark["ts"] < end:
                continue
            name = category_of(mark["action"])
            seconds[name] = round(seconds.get(name, 0.0) + min(following["ts"], end) - mark["ts"], 2)
            if mark["uuid"] in ran:
                tasks[name] = tasks.get(name, 0) + 1
        batches.append({"seconds": seconds, "tasks_run": tasks})
    return batches


def add_breakdowns(results, work_dir):
    """batch_breakdown of every run whose timeline is still in the work dir (measure() keeps it there)."""
    for key, run in results.get("runs", {}).items():
        path = os.path.join(work_dir, "%s-%d" % (bench.slug(run["label"]), run["nodes"]), "timeline.jsonl")
        if os.path.exists(path):
            timeline = bench.read_jsonl(path)
            spans = bench.batch_spans(timeline, timeline[-1]["ts"], run["batches"])
            run["batch_breakdown"] = batch_breakdown(timeline, spans)


def measure(args, label, commit, nodes):
    from gpulab.testkit.api_records import requests
    from gpulab.testkit.lab import start_lab, stop_lab
    sha, collections = tree_of(commit, args.work_dir)
    work_dir = os.path.join(args.work_dir, "%s-%d" % (bench.slug(label), nodes))
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir)
    state_dir = os.path.join(work_dir, "state")
    os.sched_setaffinity(0, {TWIN_CPU})       # the twin's processes inherit it
    lab = start_lab(state_dir, "--nodes", str(nodes), "--driver", bench.FROM, "--runfile", bench.FROM,
                    "--boot-delay", str(args.boot_delay), "--install-seconds", str(args.install_seconds))
    try:
        names = ["gpu-node-%02d" % (index + 1) for index in range(nodes)]
        bench.start_workload(lab, names, args.drain_seconds)
        time.sleep(2)
        run = run_playbook(lab, args, nodes, collections, work_dir)
        batches = bench.floor_of(lab, run, {"canary": args.soak_canary, "batch": args.soak_batch})
        api_requests = len(requests(lab.state_dir, run["started"]))
    finally:
        stop_lab(lab)
    wall = run["ended"] - run["started"]
    floor = sum(batch["floor_s"] for batch in batches)
    measured = {"wall_s": round(wall, 2), "per_batch": batches}
    bench.set_batch_walls(measured, run["timeline"], run["ended"])
    spans = bench.batch_spans(run["timeline"], run["ended"], len(batches))
    processes = module_processes_per_batch(run["timeline"], spans)
    sizes = [len(batch["nodes"]) for batch in batches]
    return {
        "label": label, "commit": sha, "nodes": nodes,
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(wall, 2), "floor_s": round(floor, 2), "ratio": round(wall / floor, 3),
        "batches": len(batches), "batch_sizes": sizes,
        "overhead_per_batch_s": round((wall - floor) / len(batches), 2),
        "batch_overhead_s": measured["in_batch_overhead_s"],
        "controller_cpu_s": round(run["controller_cpu_s"], 2),
        "controller_cpu_per_node_s": round(run["controller_cpu_s"] / nodes, 3),
        "k8s_module_processes_per_batch": processes,
        "api_requests": api_requests, "api_requests_per_node": round(api_requests / float(nodes), 1),
        "controller_peak_rss_mib": run["controller_peak_rss_mib"],
        "forks": args.forks,
    }


# --------------------------------------------------------------------------- the plan and the health check at scale

PLAN_PLAYBOOK = [{
    "name": "Plan and health check at scale", "hosts": "localhost", "gather_facts": False,
    "module_defaults": {"group/gpuops.nvidia.k8s": {"kubeconfig": "{{ kubeconfig }}"}},
    "tasks": [
        {"name": "Plan", "gpuops.nvidia.driver_upgrade_plan": {
            "driver_version": bench.TO, "cluster_name": "gpulab", "nodes": "{{ node_names }}",
            "batches": [1, "25%"], "max_unavailable": "25%"}, "register": "plan"},
        {"name": "Fleet report", "gpuops.nvidia.gpu_fleet_report": {}, "register": "report"},
    ]}]


def measure_plan(args, nodes):
    from gpulab.testkit.api_records import requests
    from gpulab.testkit.lab import start_lab, stop_lab
    work_dir = os.path.join(args.work_dir, "plan-%d" % nodes)
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir)
    os.sched_setaffinity(0, {TWIN_CPU})
    lab = start_lab(os.path.join(work_dir, "state"), "--nodes", "1", "--api-only", str(nodes))
    try:
        playbook = os.path.join(work_dir, "plan.yml")
        with open(playbook, "w") as stream:
            json.dump(PLAN_PLAYBOOK, stream)
        names = ["gpu-node-01"] + ["api-gpu-%04d" % (index + 1) for index in range(nodes)]
        timeline = os.path.join(work_dir, "timeline.jsonl")
        env = dict(bench.playbook_env(lab, argparse.Namespace(callbacks=[], mitogen=None, forks=5), timeline),
                   ANSIBLE_COLLECTIONS_PATH=tree_of(args.after, args.work_dir)[1])
        since = time.time()
        done = subprocess.run(["ansible-playbook", playbook, "-e", json.dumps({
            "kubeconfig": os.path.join(lab.state_dir, "kubeconfig"), "node_names": names})],
            capture_output=True, text=True, env=env, timeout=1800,
            preexec_fn=lambda: os.sched_setaffinity(0, {CONTROLLER_CPU}))
        if done.returncode != 0:
            raise RuntimeError("plan playbook failed:\n" + (done.stdout + done.stderr)[-3000:])
        records = bench.read_jsonl(timeline)
        spans = {}
        for record in records:
            if record["kind"] == "task":
                spans[record["name"]] = [record["ts"], None]
            elif record["kind"] == "result":
                spans[record["name"]][1] = record["ts"]
        found = requests(lab.state_dir, since)
    finally:
        stop_lab(lab)
    return {"nodes": nodes + 1, "plan_wall_s": round(spans["Plan"][1] - spans["Plan"][0], 2),
            "report_wall_s": round(spans["Fleet report"][1] - spans["Fleet report"][0], 2),
            "api_requests": len(found),
            "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


# --------------------------------------------------------------------------- results

def write_markdown(results, path):
    runs = results.get("runs", {})
    labels = sorted({run["label"] for run in runs.values()})
    sizes = sorted({run["nodes"] for run in runs.values()})
    lines = ["# Fleet scale: the controller's cost of a driver roll-out", "",
             "Written by `benchmarks/fleet_scale.py` on %s (%s CPUs); twin on CPU %d, controller on CPU %d. "
             "One column per runbook and fleet size; a 1-node canary, then batches of 25 %%."
             % (results.get("machine", {}).get("host", "?"), results.get("machine", {}).get("cpus", "?"),
                TWIN_CPU, CONTROLLER_CPU), ""]
    columns = [(label, size) for size in sizes for label in labels if "%s/%d" % (label, size) in runs]
    lines.append("| | " + " | ".join("%s, %d nodes" % column for column in columns) + " |")
    lines.append("|---|" + "---|" * len(columns))

    def row(title, render):
        lines.append("| %s | %s |" % (title, " | ".join(render(runs["%s/%d" % column]) for column in columns)))

    row("commit", lambda run: run["commit"])
    row("wall s", lambda run: "%.0f" % run["wall_s"])
    row("floor s", lambda run: "%.0f" % run["floor_s"])
    row("wall / floor", lambda run: "%.2f" % run["ratio"])
    row("batches (sizes)", lambda run: "%d (%s)" % (run["batches"], ",".join(str(s) for s in run["batch_sizes"])))
    row("overhead per batch s", lambda run: "%.1f" % run["overhead_per_batch_s"])
    row("controller CPU s", lambda run: "%.0f" % run["controller_cpu_s"])
    row("controller CPU per node s", lambda run: "%.2f" % run["controller_cpu_per_node_s"])
    row("K8s module processes per batch", lambda run: ",".join(str(n) for n in run["k8s_module_processes_per_batch"]))
    row("API requests per node", lambda run: "%.0f" % run["api_requests_per_node"])
    row("controller peak RSS MiB", lambda run: "%.0f" % run["controller_peak_rss_mib"])
    row("forks", lambda run: str(run["forks"]))
    broken_down = [column for column in columns if runs["%s/%d" % column].get("batch_breakdown")]
    if broken_down:
        lines += ["", "## Where a full batch's wall goes", "",
                  "The second batch of each run (the first full one after the canary): the spans of the tasks that "
                  "started in it (a task's start to the next one's), summed by what the task runs, with the number "
                  "of tasks that ran a module on some host. The floor (boot, install, drain, soak) sits inside "
                  "these spans.", "",
                  "| | " + " | ".join("%s, %d nodes" % column for column in broken_down) + " |",
                  "|---|" + "---|" * len(broken_down)]
        second = {column: runs["%s/%d" % column]["batch_breakdown"][min(1, len(
            runs["%s/%d" % column]["batch_breakdown"]) - 1)] for column in broken_down}
        names = sorted({name for batch in second.values() for name in batch["seconds"]})
        for name in names:
            lines.append("| %s | %s |" % (name, " | ".join(
                "%.0f s (%d tasks)" % (second[column]["seconds"].get(name, 0.0),
                                       second[column]["tasks_run"].get(name, 0)) for column in broken_down)))
    plans = results.get("plan", {})
    if plans:
        lines += ["", "## The plan and the health check on API-only nodes", "",
                  "| nodes | driver_upgrade_plan s | gpu_fleet_report s | API requests |", "|---|---|---|---|"]
        for key in sorted(plans, key=int):
            plan = plans[key]
            lines.append("| %d | %.1f | %.1f | %d |" % (plan["nodes"], plan["plan_wall_s"], plan["report_wall_s"],
                                                       plan["api_requests"]))
    with open(path, "w") as stream:
        stream.write("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="*", default=[8, 16, 32, 64])
    parser.add_argument("--before", help="the commit of the runbook to compare with (a column per fleet size)")
    parser.add_argument("--after", default="HEAD", help="the commit of the runbook under test (default HEAD)")
    parser.add_argument("--plan-nodes", type=int, help="measure only the plan and the health check on N API-only nodes")
    parser.add_argument("--boot-delay", type=float, default=5.0)
    parser.add_argument("--install-seconds", type=float, default=10.0)
    parser.add_argument("--drain-seconds", type=float, default=3.0)
    parser.add_argument("--soak-canary", type=int, default=10)
    parser.add_argument("--soak-batch", type=int, default=5)
    parser.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "bench-fleet-scale"))
    parser.add_argument("--results", default=os.path.join(RESULTS, "fleet_scale.json"))
    parser.add_argument("--report", action="store_true", help="only rewrite the markdown from the JSON (and add "
                        "the per-batch breakdown of the runs whose timelines are in --work-dir)")
    args = parser.parse_args()
    args.callbacks, args.mitogen, args.forks = [], None, 5
    results = bench.load_results(args.results)
    results["machine"] = {"host": platform.node(), "cpus": os.cpu_count()}
    if args.report:
        add_breakdowns(results, args.work_dir)
    else:
        os.makedirs(args.work_dir, exist_ok=True)
        if args.plan_nodes:
            results.setdefault("plan", {})[str(args.plan_nodes)] = measure_plan(args, args.plan_nodes)
        else:
            for nodes in args.nodes:
                for label, commit in (("before", args.before), ("after", args.after)):
                    if commit is None:
                        continue
                    measured = measure(args, label, commit, nodes)
                    add_breakdowns({"runs": {"new": measured}}, args.work_dir)
                    results.setdefault("runs", {})["%s/%d" % (label, nodes)] = measured
                    print(json.dumps(measured), flush=True)
                    with open(args.results, "w") as stream:     # each run kept as soon as it is measured
                        json.dump(results, stream, indent=1, sort_keys=True)
    with open(args.results, "w") as stream:
        json.dump(results, stream, indent=1, sort_keys=True)
    write_markdown(results, os.path.splitext(args.results)[0] + ".md")


if __name__ == "__main__":
    main()
