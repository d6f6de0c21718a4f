"""kubernetes.core's own integration targets run against the Kubernetes API twin: a manual tool, not part of CI.

    PYTHONPATH=lab .venv/bin/python -m gpulab.testkit.k8s_targets --checkout /work/.mirror/ansible-collections+kubernetes.core/repo
        [--ref 6.2.0] [--targets k8s_info,k8s_apply] [--timeout 900] [--jobs 3]
        [--out benchmarks/results/kubernetes_core_targets.md]

`--checkout` is a git directory of github.com/ansible-collections/kubernetes.core (the `fetch` tool's mirror or a
clone); `--ref` defaults to the version of the kubernetes.core the venv's `ansible` package installs, so the
targets test the modules they were written for. The tree at that ref is `git archive`d into a work folder as
`ansible_collections/kubernetes/core`, and each target runs as its CI runs it (`bash runme.sh` in the target's
folder, `ANSIBLE_ROLES_PATH=../`), with a private `HOME` whose `.kube/config` points at a fresh twin per target (`KubeCluster` with two GPU nodes in a process of its own; a pod's command runs as
a process of this machine, as in the lab tests' `FakeNodeView(host_processes=True)`: the targets' commands are
echo, date, seq and sleep, killed when the twin stops). Targets that need what the twin cannot
give are skipped with the reason (disabled in their aliases, the Helm binary, a registry, kustomize).
Targets that pip-install kubernetes client releases into virtualenvs (k8s_apply, k8s_check_mode, k8s_validate)
run: they install from PyPI as in their CI, with the `virtualenv` command their CI image has (installed from
PyPI into a tools venv of the work folder, on PATH after the venv's own bin).

`--keep-others` reruns some targets (`--targets`) and keeps the other rows of `--out` as they were;
`--before TABLE` (repeatable, with as many `--before-label`) adds each earlier table's results as a column.

The result is a Markdown table (target, result, seconds, the first failed task) and each target's log under
`<out>.logs/` (not committed).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from gpulab.kube.api.tls import issue_client_certificate
from gpulab.kube.sim.cluster import KubeCluster
from gpulab.kube.testing import FakeNodeView, make_gpus

LAB_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPO_DIR = os.path.dirname(LAB_DIR)
VENV_BIN = os.path.dirname(sys.executable)
DEFAULT_OUT = os.path.join(REPO_DIR, "benchmarks", "results", "kubernetes_core_targets.md")
TARGETS_DIR = os.path.join("tests", "integration", "targets")


def installed_version() -> str:
    """The kubernetes.core version the venv's `ansible` package ships (its MANIFEST.json)."""
    import ansible_collections  # the `ansible` package's namespace package
    for base in ansible_collections.__path__:
        manifest = os.path.join(base, "kubernetes", "core", "MANIFEST.json")
        if os.path.exists(manifest):
            with open(manifest) as stream:
                return json.load(stream)["collection_info"]["version"]
    raise SystemExit("no kubernetes.core in this venv's ansible package: pass --ref")


def extract(checkout: str, ref: str, work: str) -> str:
    collection = os.path.join(work, "ansible_collections", "kubernetes", "core")
    os.makedirs(collection)
    archive = subprocess.run(["git", "-C", checkout, "archive", "--format=tar", ref], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", collection], input=archive, check=True)
    return collection


# targets whose tasks need what the twin does not give (read from their tasks)
NEEDS_WHAT_THE_TWIN_LACKS = {
    "k8s_copy": "k8s_cp runs tar through exec in the container's own filesystem (the twin's containers have none)",
    "k8s_exec": "exec into a container (the twin serves no exec/attach streams)",
    "k8s_info": "its discovery tasks apply KubeVirt's release manifests from github.com (the internet); the rest of "
                "its tasks passed against the twin (2026-12-04, 894 s)",
}


def skip_reason(target_dir: str):
    """Why a target cannot run against the twin, or None."""
    name = os.path.basename(target_dir)
    aliases = _read(os.path.join(target_dir, "aliases")).split()
    meta = _read(os.path.join(target_dir, "meta", "main.yml"))
    if "disabled" in aliases:
        return "disabled in its aliases (a setup role)"
    if not os.path.exists(os.path.join(target_dir, "runme.sh")):
        return "no runme.sh"
    if name.startswith("helm") or "install_helm" in meta:
        if shutil.which("helm") is None:
            return "needs the Helm binary and charts from the internet"
    if "setup_helm_registry" in meta or "registry" in name:
        return "needs an OCI registry"
    if name == "lookup_kustomize" and shutil.which("kustomize") is None:
        return "needs the kustomize binary"
    if name == "k8s_manifest_url" and not os.path.exists("/var/run/docker.sock"):
        return "serves its manifests from an nginx container (a Docker daemon and an image registry)"
    return NEEDS_WHAT_THE_TWIN_LACKS.get(name)


def _read(path: str) -> str:
    try:
        with open(path) as stream:
            return stream.read()
    except OSError:
        return ""


def serve_twin(state_dir: str) -> None:
    """`--serve-twin DIR`: a twin in this process until stdin closes (one process per target: twins in one
    process would share the table of custom resources)."""
    # host_processes: a pod's command runs as a process (the targets' commands are echo, date, sleep, seq)
    host_processes = os.environ.get("GPULAB_TARGETS_HOST_PROCESSES", "1") == "1"
    views = [FakeNodeView("gpu-%d" % index, gpus=make_gpus(8), host_processes=host_processes) for index in range(2)]
    twin = KubeCluster(state_dir, views, heartbeat_s=1.0, tick_s=0.1, crash_backoff_s=1.0, job_backoff_s=1.0,
                       container_start_s=0.5, container_pid1_signals=True).start()
    try:
        print("ready", flush=True)
        sys.stdin.read()
    finally:
        twin.stop()


def start_twin(state_dir: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([LAB_DIR, os.environ.get("PYTHONPATH", "")]))
    process = subprocess.Popen([sys.executable, "-m", "gpulab.testkit.k8s_targets", "--serve-twin", state_dir],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    if process.stdout.readline().strip() != "ready":
        process.kill()
        raise RuntimeError("the twin of %s did not start" % state_dir)
    return process


def stop_twin(process: subprocess.Popen) -> None:
    process.stdin.close()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def first_failure(log: str) -> str:
    """The first failed task of an ansible-playbook log that was not ignored (`TASK [...]`, then `fatal:` and
    its message up to the next task, without `...ignoring`), or the log's last line."""
    task, lines = None, log.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("TASK ["):
            task = line[len("TASK ["):].split("]", 1)[0]
        elif line.startswith(("fatal:", "failed:")):
            block = []
            for following in lines[index:]:
                if following.startswith(("TASK [", "PLAY RECAP")) and block:
                    break
                block.append(following)
            if any(one.startswith("...ignoring") for one in block):
                continue
            message = re.search(r'"msg": "((?:[^"\\]|\\.){0,200})', "\n".join(block))
            return "%s: %s" % (task, message.group(1) if message else line[:200])
    lines = [line for line in lines if line.strip()]
    return lines[-1][:200] if lines else ""


def write_client_certificate_kubeconfig(kubeconfig: str, ca_dir: str, path: str) -> None:
    """The twin's kubeconfig with kind's kind of user: a client certificate of `kubernetes-admin` in
    `system:masters` instead of the token (setup_kubeconfig's `test_inventory_read_credentials` copies it)."""
    cert_path, key_path = issue_client_certificate(ca_dir, "kubernetes-admin", ["system:masters"], "kubernetes-admin")
    with open(kubeconfig) as stream:
        document = json.load(stream)
    document["users"][0]["user"] = {"client-certificate-data": base64.b64encode(_read(cert_path).encode()).decode(),
                                    "client-key-data": base64.b64encode(_read(key_path).encode()).decode()}
    with open(path, "w") as stream:
        json.dump(document, stream, indent=2)


def needs_virtualenv(target_dir: str) -> bool:
    """Whether a target's tasks create virtualenvs with the `virtualenv` command."""
    tasks = os.path.join(target_dir, "tasks")
    names = os.listdir(tasks) if os.path.isdir(tasks) else []
    return any("virtualenv_command" in _read(os.path.join(tasks, name)) for name in names)


def virtualenv_bin(work: str) -> str:
    """A bin folder with the `virtualenv` command (a venv of the work folder, virtualenv from PyPI)."""
    tools = os.path.join(work, "tools")
    subprocess.run([sys.executable, "-m", "venv", tools], check=True)
    subprocess.run([os.path.join(tools, "bin", "python"), "-m", "pip", "install", "-q", "virtualenv"], check=True,
                   timeout=600)
    return os.path.join(tools, "bin")


def run_target(collection: str, name: str, timeout: int, log_dir: str, extra_path: str = "") -> dict:
    target_dir = os.path.join(collection, TARGETS_DIR, name)
    state_dir = tempfile.mkdtemp(prefix="k8s-target-%s-" % name)
    twin = start_twin(state_dir)
    kubeconfig = os.path.join(state_dir, "kubeconfig")
    started = time.monotonic()
    try:
        home = os.path.join(state_dir, "home")
        os.makedirs(os.path.join(home, ".kube"))
        write_client_certificate_kubeconfig(kubeconfig, os.path.join(state_dir, "keys", "kube"),
                                            os.path.join(home, ".kube", "config"))
        # the twin is ~/.kube/config only, as in the targets' CI (k8s_full checks that nothing else is)
        env = {key: value for key, value in os.environ.items() if not key.startswith(("K8S_AUTH_", "KUBECONFIG"))}
        env.update(HOME=home,
                   ANSIBLE_COLLECTIONS_PATH=os.path.dirname(os.path.dirname(os.path.dirname(collection))),
                   ANSIBLE_DEPRECATION_WARNINGS="false", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_PYTHON_INTERPRETER=sys.executable,
                   PATH=os.pathsep.join([VENV_BIN] + ([extra_path] if extra_path else [])
                                        + [os.environ.get("PATH", "/usr/bin:/bin")]))
        # the interpreter as a host variable of the inventory, as ansible-test passes it (not `-e`: an extra var
        # would override the `vars: ansible_python_interpreter` of tasks that run in their own virtualenv)
        inventory = os.path.join(state_dir, "inventory")
        with open(inventory, "w") as stream:
            stream.write("localhost ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
        log_path = os.path.join(log_dir, name + ".log")
        with open(log_path, "w") as stream:       # streamed: a running target's progress is readable there
            process = subprocess.Popen(["bash", "runme.sh", "-i", inventory],
                                       cwd=target_dir, env=env, stdout=stream, stderr=subprocess.STDOUT,
                                       start_new_session=True)
            try:
                code = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)     # runme.sh's whole session: ansible-playbook and workers
                process.wait()
                code = None
        log = _read(log_path)
        if code is None:
            log += "\ntimed out after %d s\n" % timeout
    finally:
        stop_twin(twin)
        shutil.rmtree(state_dir, ignore_errors=True)
    seconds = time.monotonic() - started
    if code == 0:
        return {"target": name, "result": "passed", "seconds": seconds, "detail": ""}
    return {"target": name, "result": "failed" if code is not None else "timed out", "seconds": seconds,
            "detail": first_failure(log)}


def read_results(path: str) -> dict:
    """target -> result of a table this tool wrote (for `--before`)."""
    results = {}
    for line in _read(path).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[-3] in ("passed", "failed", "timed out", "skipped"):
            results[cells[0]] = cells[-3]     # the table's own result column (earlier columns come before it)
    return results


def write_table(path: str, ref: str, rows: list, before=None, before_label="", note: str = "") -> None:
    """``before``: one earlier table's results (target -> result) or a list of them, each a column labelled by
    ``before_label`` (a string or a list as long)."""
    befores = before if isinstance(before, list) else ([before] if before else [])
    labels = before_label if isinstance(before_label, list) else [before_label] * len(befores)
    labels = list(labels) + ["before"] * (len(befores) - len(labels))
    ran = [row for row in rows if row["result"] != "skipped"]
    passed = [row for row in ran if row["result"] == "passed"]
    lines = ["# kubernetes.core %s integration targets against the API twin" % ref, "",
             "Written by `lab/gpulab/testkit/k8s_targets.py` (a manual tool, not run in CI; its docstring says how "
             "to run it). %d of %d targets that ran passed; %d skipped." % (len(passed), len(ran),
                                                                            len(rows) - len(ran)), ""]
    for results, label in zip(befores, labels):
        ran_before = [result for result in results.values() if result != "skipped"]
        lines += ["%s (column `%s`): %d of %d that ran passed." % (
            label, label, sum(1 for result in ran_before if result == "passed"), len(ran_before)), ""]
    if note:
        lines += [note, ""]
    lines += ["| target | %sresult | seconds | first failure / why skipped |" % "".join(
        "%s | " % label for label in labels), "|---|" + "---|" * (len(labels) + 3)]
    for row in rows:
        detail = row["detail"].replace("|", "\\|").replace("\n", " ")
        seconds = "%.0f" % row["seconds"] if row.get("seconds") is not None else ""
        cells = [row["target"]] + [results.get(row["target"], "") for results in befores] + [row["result"], seconds,
                                                                                            detail]
        lines.append("| %s |" % " | ".join(cells))
    with open(path, "w") as stream:
        stream.write("\n".join(lines) + "\n")


def read_rows(path: str) -> list:
    """The rows (target, result, seconds, detail) of a table this tool wrote."""
    rows = []
    for line in _read(path).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[-3] in ("passed", "failed", "timed out", "skipped"):
            rows.append({"target": cells[0], "result": cells[-3],
                         "seconds": float(cells[-2]) if cells[-2] else None, "detail": cells[-1]})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", help="git directory of ansible-collections/kubernetes.core")
    parser.add_argument("--serve-twin", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--ref", help="tag or commit (default: the installed kubernetes.core's version)")
    parser.add_argument("--targets", help="comma-separated target names (default: all)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per target")
    parser.add_argument("--jobs", type=int, default=1, help="targets run at once (each against its own twin)")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--before", action="append",
                        help="a table this tool wrote earlier: its results become a column (repeatable)")
    parser.add_argument("--before-label", action="append", help="what each --before was run on (its column)")
    parser.add_argument("--keep-others", action="store_true",
                        help="keep the rows of --out for the targets not run now (a rerun of --targets)")
    parser.add_argument("--note", default="", help="a paragraph written above the table")
    parser.add_argument("--table-only", action="store_true",
                        help="rewrite --out (adding --before) from the rows it holds, running nothing")
    args = parser.parse_args(argv)
    if args.serve_twin:
        serve_twin(args.serve_twin)
        return 0
    if not args.checkout and not args.table_only:
        parser.error("--checkout is required")
    ref = args.ref or installed_version()
    befores = [read_results(path) for path in args.before or []]
    labels = args.before_label or ["the earlier run"] * len(befores)
    if args.table_only:
        write_table(args.out, ref, read_rows(args.out), befores, labels, args.note)
        return 0
    kept = read_rows(args.out) if args.keep_others else []
    work = tempfile.mkdtemp(prefix="k8s-targets-")
    log_dir = args.out + ".logs"
    os.makedirs(log_dir, exist_ok=True)
    rows = []
    try:
        collection = extract(args.checkout, ref, work)
        names = sorted(os.listdir(os.path.join(collection, TARGETS_DIR)))
        if args.targets:
            names = [name for name in names if name in args.targets.split(",")]
        to_run = []
        for name in names:
            reason = skip_reason(os.path.join(collection, TARGETS_DIR, name))
            if reason:
                rows.append({"target": name, "result": "skipped", "seconds": None, "detail": reason})
            else:
                to_run.append(name)

        extra_path = ""
        if any(needs_virtualenv(os.path.join(collection, TARGETS_DIR, name)) for name in to_run):
            extra_path = virtualenv_bin(work)

        def one(name):
            row = run_target(collection, name, args.timeout, log_dir, extra_path)
            print("%-28s %-9s %5.0f s  %s" % (row["target"], row["result"], row["seconds"], row["detail"]),
                  flush=True)
            return row
        # each target has its own twin, HOME and namespace: --jobs N runs N of them at once
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            rows += list(pool.map(one, to_run))
        done = {row["target"] for row in rows}
        rows += [row for row in kept if row["target"] not in done]
        rows.sort(key=lambda row: row["target"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_table(args.out, ref, rows, befores, labels, args.note)
    return 0 if all(row["result"] in ("passed", "skipped") for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
