"""Chaos soak of the driver roll-out (a soak, not a unit test): rounds of `gpuops.nvidia.driver_upgrade` on fresh
twin fleets while faults nobody scripted fire at random moments, each round judged from the twin's records.

    make chaos SEEDS="1 2 3" [CHAOS_NODES=4] [CHAOS_JOBS=3]
    PYTHONPATH=lab ANSIBLE_COLLECTIONS_PATH=$TREE PATH=$PWD/.venv/bin:$PATH \\
        .venv/bin/python benchmarks/chaos.py --seeds 1 2 3 [--nodes 4]
    .venv/bin/python benchmarks/chaos.py --report       # only rewrite results/chaos.md from results/chaos/*.json

A round (`run_round`), all drawn from its seed (benchmarks/chaos_schedule.py):
- a fresh twin of 4-8 H100 nodes on 595.91.07 (boot delay 0.5 s, installs of 1 s, a real Prometheus), a real
  Alertmanager, a Deployment with a PDB (maxUnavailable 1) and a Job whose pods run a few seconds;
- a confirmed run to 615.71.09 with random valid inputs (batches within the budget, budget, soaks, rollback on
  or off, `gpuops_wait_for_pods_selector` on the Job or not), the Prometheus soak gate and Alertmanager silences;
- 1-3 faults, each fired at a moment counted from the first run: seconds elapsed, the n-th task the runs
  printed, or the n-th change of a node's upgrade record (benchmarks/chaos_faults.py applies them); a controller
  kill (SIGKILL of ansible-playbook's process group) is followed at once by a resume run with the same run id;
- then every fault is cleared and the runbook resumed (same run id) until the fleet is done or a run refuses
  without moving any record (a failed node blocks it until a person looks);
- the judgement (benchmarks/chaos_invariants.py and `gpulab.kube.sim.checker`) over the twin's records, the
  nodes' end state, Alertmanager's silences, the lock and the audit trail; written to results/chaos/<seed>.json,
  and the table of all rounds to results/chaos.md.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import glob
import json
import multiprocessing
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "lab", "tests"))
sys.path.insert(0, os.path.join(REPO, "lab"))

from alertmanager_harness import AlertmanagerServer  # noqa: E402
from chaos_faults import Injector  # noqa: E402
from chaos_invariants import (FINAL_STATES, audit_names_actions, audit_ts, budget_at_own_cordons,  # noqa: E402
                              faults_after_last_look, lock_at_end, node_end_state, reboots_per_upgrade, record_of,
                              run_agrees, silences_left, twin_actions, untouched_after_a_stop, violation)
from chaos_schedule import KIND_SETS, budget_of, plan_round  # noqa: E402
from conftest import collections_path, start_lab, stop_lab  # noqa: E402
from gpulab.kube.api.recorder import read_records  # noqa: E402
from gpulab.kube.sim.checker import check_records  # noqa: E402

FROM, TO = "595.91.07", "615.71.09"
NAMESPACE = "chaos"
JOB_SELECTOR = "app=chaos-train"
XID_QUERY = {"name": "no Xid on any GPU", "query": "DCGM_FI_DEV_XID_ERRORS", "op": "==", "threshold": 0}
RESUME_RUNS = 3
SETTLE_S = 90


# --------------------------------------------------------------------------- the fleet

def workload(nodes: int) -> dict:
    """A Deployment over the fleet guarded by a PDB (one pod out at a time) and a Job of short pods."""
    stop = "trap 'sleep 1; exit 0' TERM; while :; do sleep 1 & wait $!; done"
    labels = {"app": "chaos-guarded"}
    return {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "guarded", "namespace": NAMESPACE},
         "spec": {"replicas": nodes, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"terminationGracePeriodSeconds": 10,
                                        "containers": [{"name": "work", "image": "busybox",
                                                        "command": ["sh", "-c", stop]}]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guarded",
                                                                                 "namespace": NAMESPACE},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": NAMESPACE},
         "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 2,
                  "template": {"metadata": {"labels": {"app": "chaos-train"}},
                               "spec": {"restartPolicy": "Never",
                                        "containers": [{"name": "train", "image": "busybox",
                                                        "command": ["sh", "-c", "sleep 8"]}]}}}},
    ]}


def kubectl(lab, *args, stdin=None) -> str:
    done = subprocess.run(["kubectl", "--kubeconfig", os.path.join(lab.state_dir, "kubeconfig")] + list(args),
                          input=stdin, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError("kubectl %s: %s" % (" ".join(args), done.stderr))
    return done.stdout


def start_workload(lab, nodes: int) -> None:
    kubectl(lab, "apply", "-f", "-", stdin=json.dumps(workload(nodes)))
    wait_for(lambda: sum(1 for pod in json.loads(kubectl(lab, "get", "pods", "-n", NAMESPACE, "-l",
                                                         "app=chaos-guarded", "-o", "json"))["items"]
                         if (pod.get("status") or {}).get("phase") == "Running") == nodes,
             "the guarded pods running", 180)


def wait_for(condition, what: str, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(1)
    raise RuntimeError("not within %ss: %s" % (timeout_s, what))


def nodes_json(lab) -> dict:
    return {node["metadata"]["name"]: node for node in json.loads(kubectl(lab, "get", "nodes", "-o", "json"))["items"]}


def all_ready(lab) -> bool:
    for node in nodes_json(lab).values():
        conditions = {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []}
        if conditions.get("Ready") != "True":
            return False
    return True


# --------------------------------------------------------------------------- watching a run, firing faults

class Watcher:
    """Counts the runs' tasks (their output) and the record changes (the API twin's records), and fires each fault
    of the schedule when its moment comes; a controller kill SIGKILLs the current run's process group."""

    def __init__(self, lab, injector: Injector, faults: list, log):
        self.lab, self.injector, self.log = lab, injector, log
        self.pending = [dict(fault) for fault in faults]
        self.fired, self.releases = [], []
        self.tasks = 0
        self.record_changes = 0
        self.phase = "plan/pre-check/lock"
        self.started = None
        self.process = None
        self.killed_at = None
        self._records_offset = 0
        self._states = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self.started = time.time()
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=30)

    def on_line(self, line: str) -> None:
        if line.startswith("TASK ["):
            with self._lock:
                self.tasks += 1

    def _read_records(self) -> None:
        path = os.path.join(self.lab.state_dir, "kube-records.jsonl")
        with open(path, "rb") as stream:
            stream.seek(self._records_offset)
            chunk = stream.read()
        complete = chunk[:chunk.rfind(b"\n") + 1]      # a line being written is read at the next turn
        self._records_offset += len(complete)
        for line in complete.decode().splitlines():
            if '"record":"change"' not in line or '"resource":"nodes"' not in line:
                continue
            change = json.loads(line)
            record = record_of(change.get("object") or {})
            state = (record or {}).get("state")
            if record is not None and record != self._states.get(change["name"]):
                self.record_changes += 1
                self.phase = "soak/between batches" if state == "done" else state
            self._states[change["name"]] = record

    def due(self, trigger: dict) -> bool:
        if trigger["kind"] == "elapsed":
            return time.time() - self.started >= trigger["seconds"]
        if trigger["kind"] == "task":
            return self.tasks >= trigger["n"]
        return self.record_changes >= trigger["n"]

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._read_records()
                self._fire_due()
            except Exception as error:  # noqa: BLE001 - keep watching; the round reports it
                self.log("watcher: %r" % error)
            self._stop.wait(0.25)

    def _fire_due(self) -> None:
        now = time.time()
        for fault in [f for f in self.pending if self.due(f["trigger"])]:
            self.pending.remove(fault)
            fault.update(fired_after_s=round(now - self.started, 1), phase=self.phase, tasks_then=self.tasks,
                         record_changes_then=self.record_changes)
            if fault["kind"] == "controller-kill":
                fault["details"] = self._kill()
            else:
                fault["details"] = self.injector.apply(fault)
                if fault.get("hold_s"):
                    self.releases.append((now + fault["hold_s"], fault))
            self.log("fault %s%s at %.1f s (%s)" % (fault["kind"], " on " + fault["node"] if "node" in fault else "",
                                                    fault["fired_after_s"], fault["phase"]))
            self.fired.append(fault)
        for due, fault in [item for item in self.releases if item[0] <= now]:
            self.releases.remove((due, fault))
            self.injector.release(fault)
            fault["released_after_s"] = round(now - self.started, 1)

    def _kill(self) -> dict:
        process = self.process
        if process is None or process.poll() is not None:
            return {"skipped": "no run in flight"}
        os.killpg(process.pid, signal.SIGKILL)
        self.killed_at = time.time()
        return {"pid": process.pid}


# --------------------------------------------------------------------------- runs

class Round:
    def __init__(self, seed: int, work_dir: str, nodes=None, log=print, kinds=None):
        self.plan = plan_round(seed, nodes, kinds) if kinds else plan_round(seed, nodes)
        self.seed = seed
        self.work_dir = work_dir
        self.log = lambda text: log("[seed %s] %s" % (seed, text))
        self.audit_path = os.path.join(work_dir, "audit.jsonl")
        self.record_dir = os.path.join(work_dir, "runs")
        self.run_id = "chaos-%s" % seed
        self.runs = []

    def extra_vars(self, lab, alertmanager) -> dict:
        inputs = dict(self.plan["inputs"])
        wait_for_jobs = inputs.pop("wait_for_jobs")
        values = dict(inputs, gpuops_driver_version=TO, gpuops_confirm="gpulab", gpuops_run_id=self.run_id,
                      gpuops_run_record_dir=self.record_dir, gpuops_reboot_timeout=60, gpuops_ready_timeout=90,
                      gpuops_drain_timeout=20, gpuops_budget_wait_timeout=10, gpuops_wait_for_pods_timeout=60,
                      gpuops_prometheus_url=lab.info["metrics"]["prometheus_url"],
                      gpuops_prometheus_queries=[XID_QUERY], gpuops_alertmanager_url=alertmanager.url,
                      nvidia_driver_runfile_src=os.path.join(lab.state_dir, "runfiles",
                                                             "NVIDIA-Linux-x86_64-{{ nvidia_driver_version }}.run"))
        if wait_for_jobs:
            values["gpuops_wait_for_pods_selector"] = JOB_SELECTOR
        return values

    def run_once(self, lab, alertmanager, watcher=None, why="run") -> dict:
        argv = ["ansible-playbook", "-i", os.path.join(lab.state_dir, "inventory.yml"), "gpuops.nvidia.driver_upgrade",
                "-e", json.dumps(self.extra_vars(lab, alertmanager))]
        env = dict(lab.env, ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_HOST_KEY_CHECKING="false",
                   ANSIBLE_CALLBACKS_ENABLED="gpuops.nvidia.audit", GPUOPS_AUDIT_LOG=self.audit_path,
                   ANSIBLE_FORKS="16", ANSIBLE_FORCE_COLOR="false")
        started = time.time()
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                   start_new_session=True)
        if watcher is not None:
            watcher.process = process
        lines = []
        for line in process.stdout:
            lines.append(line)
            if watcher is not None:
                watcher.on_line(line)
        rc = process.wait()
        output = "".join(lines)
        index = len(self.runs) + 1
        with open(os.path.join(self.work_dir, "run-%d.log" % index), "w") as stream:
            stream.write(output)
        record_path = os.path.join(self.record_dir, "driver-upgrade-%s.json" % self.run_id)
        run_record = None
        if os.path.exists(record_path) and os.path.getmtime(record_path) >= started:
            with open(record_path) as stream:
                run_record = json.load(stream)
        run = {"index": index, "why": why, "rc": rc, "killed": rc == -signal.SIGKILL, "started": started,
               "wall_s": round(time.time() - started, 1),
               "outcome": (run_record or {}).get("outcome"), "run_record": run_record, "output": output}
        self.runs.append(run)
        self.log("run %d (%s): rc %d, %s, %.0f s" % (index, why, rc, run["outcome"], run["wall_s"]))
        return run


def upgrade_records(lab) -> dict:
    """node -> its upgrade record now (None: none)."""
    return {name: record_of(node) for name, node in nodes_json(lab).items()}


def read_audit(path: str) -> list:
    if not os.path.exists(path):
        return []
    with open(path) as stream:
        return [json.loads(line) for line in stream if line.strip()]


def verify_audit(path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "runner", "src"))
    done = subprocess.run([sys.executable, "-m", "gpuops_runner", "audit", "verify", path, "--collections-path",
                           collections_path()], capture_output=True, text=True, env=env, timeout=120)
    return {"rc": done.returncode, "output": (done.stdout + done.stderr).strip()[-500:]}


def silences(url: str) -> list:
    with urllib.request.urlopen(url + "/api/v2/silences", timeout=10) as response:
        return json.load(response)


def lock_holder(lab):
    for lease in json.loads(kubectl(lab, "get", "leases", "-n", "kube-system", "-o", "json"))["items"]:
        if lease["metadata"]["name"] == "gpuops-nvidia-rollout":
            return lease["spec"].get("holderIdentity")
    return None


def loaded_version(lab, node: str):
    done = lab.ssh(node, "cat /sys/module/nvidia/version", check=False, timeout=20)
    return done.stdout.strip() if done.returncode == 0 else None


# --------------------------------------------------------------------------- one round

def run_round(seed: int, work_dir: str, nodes=None, log=None, kinds=None) -> dict:
    """One round from its seed on a fresh twin in work_dir, judged: the result (main writes it to
    results/chaos/<seed>.json)."""
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir)
    chaos = Round(seed, work_dir, nodes, log or (lambda text: print(text, flush=True)), kinds)
    plan = chaos.plan
    chaos.log("plan: %s" % json.dumps(plan))
    started = time.time()
    lab = start_lab(os.path.join(work_dir, "state"), "--nodes", str(plan["nodes"]), "--driver", FROM, "--runfile",
                    FROM, "--boot-delay", "0.5", "--mok-timeout", "1", "--install-seconds", "1", "--prometheus")
    alertmanager = None
    try:
        alertmanager = AlertmanagerServer(os.path.join(work_dir, "alertmanager")).start()
        start_workload(lab, plan["nodes"])
        injector = Injector(lab, collections_path(), alertmanager)
        watcher = Watcher(lab, injector, plan["faults"], chaos.log)
        round_start = time.time()
        watcher.start()
        first = chaos.run_once(lab, alertmanager, watcher, "first run")
        killed_runs = []
        if first["killed"]:
            killed_runs.append(first)
            chaos.run_once(lab, alertmanager, watcher, "resume after the controller kill")
        watcher.stop()
        injector.clear_all()
        try:
            wait_for(lambda: all_ready(lab), "every node Ready again after the faults were cleared", SETTLE_S)
        except RuntimeError as error:
            chaos.log(str(error))
        for _ in range(RESUME_RUNS):
            if chaos.runs[-1]["rc"] == 0:
                break
            before = upgrade_records(lab)
            chaos.run_once(lab, alertmanager, None, "resume after the faults were cleared")
            if chaos.runs[-1]["rc"] != 0 and upgrade_records(lab) == before:
                break     # refused without moving a record: it says why, a person has to look
        try:
            wait_for(lambda: all_ready(lab), "every node Ready at the end", SETTLE_S)
        except RuntimeError as error:
            chaos.log(str(error))
        result = judge(chaos, lab, alertmanager, watcher, killed_runs, round_start)
    finally:
        if alertmanager is not None:
            alertmanager.stop()
        for name in ("kube-records.jsonl", "events.jsonl"):     # kept for a post-mortem: `down` removes the state
            if os.path.exists(os.path.join(lab.state_dir, name)):
                shutil.copy(os.path.join(lab.state_dir, name), os.path.join(work_dir, name))
        stop_lab(lab)
    result["wall_s"] = round(time.time() - started, 1)
    return result


def judge(chaos: Round, lab, alertmanager, watcher: Watcher, killed_runs: list, round_start: float) -> dict:
    plan = chaos.plan
    # the replays start from the lab's first record: the workload's pods and the nodes as they were before the run
    records = list(read_records(os.path.join(lab.state_dir, "kube-records.jsonl")))
    changes = [record for record in records if record.get("record") == "change"]
    all_events = lab.events()
    events = [event for event in all_events if event.get("ts", 0) >= round_start]
    nodes = nodes_json(lab)
    final_records = {name: record_of(node) for name, node in nodes.items()}
    audit = read_audit(chaos.audit_path)
    budget = budget_of(plan["inputs"]["gpuops_max_unavailable"], plan["nodes"])
    checked = check_records(records, all_events, None)
    boots = {}
    for event in events:
        if event.get("kind") == "up":
            boots[event["node"]] = boots.get(event["node"], 0) + 1
    killed_spans = []
    for run in killed_runs:
        lines = [audit_ts(line["ts"]) for line in audit if audit_ts(line["ts"]) <= (watcher.killed_at or 0)]
        killed_spans.append((max(lines) if lines else run["started"], watcher.killed_at or time.time()))
    last = chaos.runs[-1]
    verified = verify_audit(chaos.audit_path)
    violations = [violation("pdb", "eviction %s/%s broke PDB %s" % (v["namespace"], v["pod"], v["pdb"]), **v)
                  for v in checked["pdb_violations"]]
    violations += budget_at_own_cordons(changes, budget)
    violations += reboots_per_upgrade(boots, final_records)
    after_last_look = {}
    for name, node in sorted(nodes.items()):
        after_last_look[name] = faults_after_last_look(name, audit, events)
        violations += node_end_state(name, node, loaded_version(lab, name), TO,
                                     health_unseen=bool(after_last_look[name]))
    violations += untouched_after_a_stop(changes, audit)
    violations += lock_at_end(lock_holder(lab))
    violations += silences_left(silences(alertmanager.url), final_records)
    # the last run, and the last one that wrote a run record when the last refused before writing one
    recorded = next((run for run in reversed(chaos.runs) if run["run_record"] is not None), None)
    for run in [last] + ([recorded] if recorded is not None and recorded is not last else []):
        violations += run_agrees(run["rc"], run["output"], run["run_record"], final_records)
    if verified["rc"] != 0:
        violations.append(violation("audit", "the audit trail does not verify: %s" % verified["output"]))
    actions = [action for action in twin_actions(changes, events) if action[0] >= round_start]
    violations += audit_names_actions(actions, audit, killed_spans)
    end_states = {name: (record or {}).get("state") for name, record in sorted(final_records.items())}
    return {
        "seed": chaos.seed, "nodes": plan["nodes"], "inputs": plan["inputs"], "budget": budget,
        "faults": watcher.fired + [dict(fault, fired_after_s=None, phase="never reached") for fault in watcher.pending],
        "runs": [{key: run[key] for key in ("index", "why", "rc", "killed", "wall_s", "outcome")}
                 for run in chaos.runs],
        "end_states": end_states,
        "documented_end": all(state in FINAL_STATES + (None,) for state in end_states.values()),
        "max_unavailable_gpu_nodes": checked["max_unavailable_gpu_nodes"], "evictions": checked["evictions_admitted"],
        "boots": boots, "audit_lines": len(audit), "audit_verify": verified["output"],
        # faults that hit a node after the run's last check of it (its health at the end is not judged)
        "faults_after_last_look": {name: found for name, found in after_last_look.items() if found},
        "violations": violations,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(round_start)),
        "load_avg": [round(x, 2) for x in os.getloadavg()], "host": platform.node(), "cpus": os.cpu_count(),
    }


# --------------------------------------------------------------------------- results

def write_result(result: dict, results_dir: str) -> str:
    os.makedirs(os.path.join(results_dir, "chaos"), exist_ok=True)
    path = os.path.join(results_dir, "chaos", "%s.json" % result["seed"])
    with open(path, "w") as stream:
        json.dump(result, stream, indent=1, sort_keys=True)
    return path


def soak_lines(results: list) -> list:
    """One line per `chaos.py` invocation (its rounds carry its start as `soak`): the soak's own counts."""
    soaks = {}
    for result in results:
        soaks.setdefault(result.get("soak"), []).append(result)
    lines = []
    for soak, rounds in sorted(soaks.items(), key=lambda item: str(item[0])):
        started = min(time.mktime(time.strptime(r["when"], "%Y-%m-%d %H:%M UTC")) for r in rounds) if soak else 0
        ended = max(time.mktime(time.strptime(r["when"], "%Y-%m-%d %H:%M UTC")) + r["wall_s"] for r in rounds)
        lines.append("- %s: %d rounds, %d violations, %d ending in a state the docs do not describe%s" % (
            "soak started %s (one `chaos.py` run, --jobs %s, seeds %s-%s)" % (
                soak, rounds[0].get("jobs", 1), rounds[0]["seed"], rounds[-1]["seed"]) if soak
            else "earlier rounds, run a few at a time while the harness grew",
            len(rounds), sum(len(r["violations"]) for r in rounds),
            sum(1 for r in rounds if not r["documented_end"]),
            ", %.0f s of rounds in %.0f min" % (sum(r["wall_s"] for r in rounds), (ended - started) / 60)
            if soak else ""))
    return lines + [""]


def write_markdown(results_dir: str) -> str:
    results = []
    for path in sorted(glob.glob(os.path.join(results_dir, "chaos", "*.json"))):
        with open(path) as stream:
            results.append(json.load(stream))
    results.sort(key=lambda result: result["seed"])
    by_kind, by_phase = {}, {}
    for result in results:
        for fault in result["faults"]:
            by_kind[fault["kind"]] = by_kind.get(fault["kind"], 0) + 1
            by_phase[fault.get("phase")] = by_phase.get(fault.get("phase"), 0) + 1
    violations = sum(len(result["violations"]) for result in results)
    lines = ["# Chaos soak of the driver roll-out", "",
             "Generated by `benchmarks/chaos.py` (`make chaos SEEDS=...`): each round is a fresh twin fleet, a "
             "confirmed `driver_upgrade.yml` run with random valid inputs and 1-3 faults at random moments, then "
             "the faults cleared, the run resumed and the twin's records judged. A round is reproduced from its "
             "seed; its schedule, inputs and violations are in `chaos/<seed>.json`.", "",
             "Rounds: %d; violations: %d; rounds ending in a state the docs do not describe: %d; time: %.0f s." % (
                 len(results), violations, sum(1 for result in results if not result["documented_end"]),
                 sum(result["wall_s"] for result in results)), "",
             ] + soak_lines(results) + [
             "| seed | nodes | budget | batches | rollback | wait for Job | faults (kind @ phase) | runs (rc) | "
             "end states | violations | wall s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for result in results:
        inputs = result["inputs"]
        faults = ", ".join("%s%s @ %s" % (fault["kind"], " " + fault["node"] if fault.get("node") else "",
                                          fault.get("phase")) for fault in result["faults"])
        states = {}
        for state in result["end_states"].values():
            states[state or "untouched"] = states.get(state or "untouched", 0) + 1
        lines.append("| %s | %d | %s (%d) | %s | %s | %s | %s | %s | %s | %d | %.0f |" % (
            "%s%s" % (result["seed"], "" if result.get("kinds", "default") == "default"
                      else " (--kinds %s)" % result["kinds"]),
            result["nodes"], inputs["gpuops_max_unavailable"], result["budget"],
            json.dumps(inputs["gpuops_upgrade_batches"]), "on" if inputs["gpuops_rollback_on_failure"] else "off",
            "yes" if inputs["wait_for_jobs"] else "no", faults,
            ", ".join(str(run["rc"]) + (" (killed)" if run["killed"] else "") for run in result["runs"]),
            ", ".join("%s %d" % item for item in sorted(states.items())), len(result["violations"]),
            result["wall_s"]))
    lines += ["", "Faults by kind: " + ", ".join("%s %d" % item for item in sorted(by_kind.items())) + ".",
              "", "Faults by phase (the state of the last record change when it fired): "
              + ", ".join("%s %d" % item for item in sorted(by_phase.items(), key=lambda item: str(item[0]))) + "."]
    found = [(result["seed"], item) for result in results for item in result["violations"]]
    if found:
        lines += ["", "## Violations", ""] + ["- seed %s, %s: %s" % (seed, item["invariant"], item["what"])
                                              for seed, item in found]
    notes = [(result["seed"], result["note"]) for result in results if result.get("note")]
    if notes:
        lines += ["", "## Notes", ""] + ["- seed %s: %s" % item for item in notes]
    path = os.path.join(results_dir, "chaos.md")
    os.makedirs(results_dir, exist_ok=True)
    with open(path, "w") as stream:
        stream.write("\n".join(lines) + "\n")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="*", type=int, default=[], help="one round per seed")
    parser.add_argument("--nodes", type=int, help="fleet size of every round (default: drawn, 4-8)")
    parser.add_argument("--work-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "gpuops-chaos"))
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--kinds", choices=tuple(KIND_SETS), default="default",
                        help="faults drawn: the recorded set; connections: that and the API server's restart and"
                        " early-closed watches (chaos_schedule.CONNECTION_FAULTS); ssh: those and ssh-cut;"
                        " restarts: those and api-down (the API server restarting, down 12 s)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="rounds at once, each on its own twin (a round mostly waits for boots, SSH and Ansible;"
                        " the schedule of a round is its seed's whatever the jobs, its timing shares the CPUs)")
    parser.add_argument("--report", action="store_true", help="only rewrite chaos.md from the results")
    args = parser.parse_args()
    args.soak = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    broken = 0
    seeds = [] if args.report else args.seeds
    if args.jobs > 1 and len(seeds) > 1:
        context = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
            rounds = [pool.submit(play_round, seed, args) for seed in seeds]
            for done in concurrent.futures.as_completed(rounds):
                broken += report_round(done.result(), args.results)
    else:
        for seed in seeds:
            broken += report_round(play_round(seed, args), args.results)
    print(write_markdown(args.results))
    return 1 if broken else 0


def play_round(seed: int, args) -> dict:
    """One round of main's seeds (in a worker process with --jobs). A round the harness could not finish is
    reported as such and the others go on."""
    prefix = "[seed %s] " % seed    # a round's lines carry its seed already (Round.log); the traceback too
    started = time.time()
    try:
        result = run_round(seed, os.path.join(args.work_dir, str(seed)), args.nodes,
                           log=lambda text: print(text, flush=True),
                           kinds=None if args.kinds == "default" else KIND_SETS[args.kinds])
    except Exception:  # noqa: BLE001 - a round the harness could not finish is reported, the others go on
        print(prefix + traceback.format_exc(), flush=True)
        return {"seed": seed, "harness_error": traceback.format_exc().splitlines()[-1],
                "wall_s": time.time() - started, "soak": args.soak}
    result["kinds"] = args.kinds    # the set the faults were drawn from: `--kinds` replays the round
    result["soak"] = args.soak      # the invocation the round belongs to: its rounds are counted together
    result["jobs"] = args.jobs
    return result


def report_round(result: dict, results_dir: str) -> int:
    if "harness_error" in result:
        print("seed %s: the harness failed (%s) after %.0f s; no result written" % (
            result["seed"], result["harness_error"], result["wall_s"]), flush=True)
        return 1
    print("seed %s: %d violation(s), %s, %.0f s -> %s" % (
        result["seed"], len(result["violations"]), result["end_states"], result["wall_s"],
        write_result(result, results_dir)), flush=True)
    return int(bool(result["violations"]))


if __name__ == "__main__":
    sys.exit(main())
