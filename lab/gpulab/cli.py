"""``python -m gpulab``: start, inspect, break and stop a fleet twin. Every command but ``up`` is a thin client
of the lab daemon's control socket ``DIR/control.sock``."""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

from gpulab import daemon, noderuntime, personality, rancherlayout
from gpulab.nvidia.profiles import CLI_PROFILES
from gpulab.osutil import LAB_DIR, read_json, write_json


class CliError(Exception):
    pass


def request(state_dir: str, payload: dict, timeout_s: float = 120) -> dict:
    path = os.path.join(state_dir, daemon.CONTROL_SOCKET)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(path)
            conn.sendall((json.dumps(payload) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
    except (FileNotFoundError, ConnectionRefusedError):
        raise CliError("no lab daemon answers in %s (run `python -m gpulab up --state-dir %s` first)"
                       % (state_dir, state_dir))
    if not data:
        raise CliError("the lab daemon closed the connection without an answer (see %s/daemon.log)" % state_dir)
    return json.loads(data)


def daemon_alive(state_dir: str) -> bool:
    pid = (read_json(os.path.join(state_dir, daemon.LAB_FILE)) or {}).get("daemon_pid")
    if not pid:
        return False
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as stream:
            return b"gpulab.daemon" in stream.read()
    except OSError:
        return False


def checked(response: dict) -> dict:
    if not response.get("ok"):
        raise CliError(response.get("error") or "request failed")
    return response


# ---- up ---------------------------------------------------------------------------------------------------
def cmd_up(args) -> int:
    state_dir = os.path.abspath(args.state_dir)
    if daemon_alive(state_dir):
        raise CliError("a lab already runs in %s (`python -m gpulab down --state-dir %s` first)" % (state_dir, state_dir))
    if not 1 <= args.nodes <= 200:
        raise CliError("--nodes must be between 1 and 200")
    if args.gpu_operator and not args.driver:
        raise CliError("--gpu-operator needs --driver VERSION (the ClusterPolicy's spec.driver.version)")
    if not 0 < args.operator_time_scale <= 1:
        raise CliError("--operator-time-scale must be in (0, 1]")
    node_os = [name for value in args.os or [] for name in value.split(",") if name]
    node_containerd = [name for value in args.containerd or [] for name in value.split(",") if name]
    node_rancher = [name for value in args.rancher or [] for name in value.split(",") if name]
    try:
        personality.fleet_os(node_os, args.nodes)
        noderuntime.fleet_containerd(node_containerd, args.nodes)
        rancherlayout.fleet_rancher(node_rancher, args.nodes)
    except ValueError as error:
        raise CliError(str(error))
    created_dir = not os.path.exists(state_dir)
    os.makedirs(state_dir, exist_ok=True)
    preexisting = [] if created_dir else sorted(os.listdir(state_dir))
    if daemon.LAB_FILE in preexisting:
        raise CliError("%s holds a lab that was not taken down (`python -m gpulab down --state-dir %s`)"
                       % (state_dir, state_dir))
    settings = {"nodes": args.nodes, "profile": args.profile, "driver": args.driver, "secure_boot": args.secure_boot,
                "secure_boot_nodes": args.secure_boot_node or [], "os": node_os,
                "runfiles": args.runfile or [], "api_only": args.api_only, "dra": args.dra, "mig_strategy": args.mig_strategy,
                "cluster_name": args.cluster_name,
                "boot_delay_s": args.boot_delay, "install_s": args.install_seconds,
                "mok_timeout_s": args.mok_timeout, "first_ip_host": args.first_ip,
                "nvidia_backend": args.nvidia_backend, "prometheus": args.prometheus,
                "prometheus_rules": [os.path.abspath(path) for path in args.prometheus_rules or []],
                "scrape_interval": args.scrape_interval, "gpu_operator": args.gpu_operator,
                "operator_time_scale": args.operator_time_scale, "bastion": args.bastion,
                "containerd": node_containerd, "rancher": node_rancher, "bmc": args.bmc, "dcgm": args.dcgm,
                "cuda_repo": args.cuda_repo or []}
    write_json(os.path.join(state_dir, daemon.LAB_FILE),
               {"status": "starting", "settings": settings, "created_dir": created_dir, "preexisting": preexisting,
                "created": time.time()})
    spawn_daemon(state_dir)
    # building the stub modules of each runfile version dominates `up` and takes minutes on a loaded machine
    # (GPU Operator mode prebuilds the driver pods' version too); the daemon reports a failed start by itself,
    # this only bounds a hang
    info = wait_ready(state_dir, timeout_s=240 + 5 * args.nodes + (60 if args.gpu_operator else 0))
    print_usage(state_dir, info)
    return 0


def spawn_daemon(state_dir: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([LAB_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                      if p and os.path.abspath(p) != LAB_DIR])
    with open(os.path.join(state_dir, daemon.DAEMON_LOG), "ab") as log:
        subprocess.Popen([sys.executable, "-m", "gpulab.daemon", state_dir], stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log, env=env, cwd="/", start_new_session=True, close_fds=True)


def wait_ready(state_dir: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = read_json(os.path.join(state_dir, daemon.LAB_FILE)) or {}
        if info.get("status") == "ready":
            return info
        if info.get("status") == "failed":
            raise CliError("lab failed to start: %s (see %s/daemon.log; `python -m gpulab down --state-dir %s`)"
                           % (info.get("error"), state_dir, state_dir))
        if info.get("daemon_pid") and not daemon_alive(state_dir):
            raise CliError("lab daemon died while starting (see %s/daemon.log)" % state_dir)
        time.sleep(0.1)
    raise CliError("lab not ready after %ds (see %s/daemon.log)" % (timeout_s, state_dir))


def print_usage(state_dir: str, info: dict) -> None:
    nodes = info.get("nodes", [])
    print("gpulab: %d node(s) up in %.1fs (%s)" % (len(nodes), info.get("up_s", 0), state_dir))
    for node in nodes:
        print("  %-14s %s" % (node["name"], node["ip"]))
    if (info.get("kube") or {}).get("api_url"):
        print("Kubernetes API: %s   kubectl --kubeconfig %s get nodes" % (info["kube"]["api_url"], info["kube"]["kubeconfig"]))
    metrics = info.get("metrics") or {}
    if metrics.get("prometheus_url"):
        print("Prometheus: %s   (scrape config %s)" % (metrics["prometheus_url"], metrics["prometheus_config"]))
    elif metrics.get("prometheus_config"):
        print("Metrics:  prometheus --config.file %s   (dcgm-exporter per node, kube-state-metrics)"
              % metrics["prometheus_config"])
    if info.get("bastion"):
        print("Bastion:  %s@%s, the only way in: the nodes' sshd is in a network of their own (ProxyJump)"
              % (info["bastion"]["user"], info["bastion"]["ip"]))
    print("Ansible:  ansible -i %s gpu_nodes -m ping" % info["inventory"])
    print("SSH:      ssh -F %s %s" % (info["ssh_config"], nodes[0]["name"] if nodes else "<node>"))
    print("Stop:     PYTHONPATH=%s python -m gpulab down --state-dir %s" % (LAB_DIR, state_dir))


# ---- other commands ------------------------------------------------------------------------------------------
def cmd_status(args) -> int:
    lab = checked(request(args.state_dir, {"op": "status"}))["lab"]
    if args.json:
        print(json.dumps(lab, indent=1, sort_keys=True))
        return 0
    print("lab %s: %s (%s)" % (lab["name"], lab["status"], lab["state_dir"]))
    if lab.get("bastion"):
        bastion = lab["bastion"]
        print("bastion %s@%s: ssh %s" % (bastion["user"], bastion["ip"], "yes" if bastion["ssh"] else "no"))
    print("%-14s %-12s %-9s %-6s %-5s %-12s %s" % ("NODE", "IP", "STATUS", "BOOTS", "SSH", "DRIVER", "FAULTS"))
    for node in lab["nodes"]:
        driver = node["kernel_driver_version"] if node["module_loaded"] else "-"
        faults = ",".join(node["faults"] + ["%s@next-boot" % kind for kind in node.get("armed_faults") or []])
        print("%-14s %-12s %-9s %-6d %-5s %-12s %s" % (node["name"], node["ip"], node["status"], node["boots"],
                                                     "yes" if node["ssh"] else "no", driver, faults or "-"))
    return 0


def cmd_fault(args) -> int:
    response = checked(request(args.state_dir, {"op": "fault", "node": args.node, "kind": args.kind,
                                                "at_next_boot": args.at_next_boot}))
    if args.at_next_boot:
        print("%s: fault %s armed: takes effect when the node next boots" % (args.node, response["fault"]))
    else:
        print("%s: fault %s applied" % (args.node, response["fault"]))
    return 0


def cmd_clear(args) -> int:
    response = checked(request(args.state_dir, {"op": "clear", "node": args.node, "kind": args.kind}))
    print("%s: cleared %s" % (args.node, ", ".join(response["cleared"]) or "nothing (no such active fault)"))
    return 0


def cmd_mok_confirm(args) -> int:
    response = checked(request(args.state_dir, {"op": "mok-confirm", "node": args.node}))
    print("%s: MOK key %s" % (args.node, response["message"]))
    return 0


def cmd_power(args) -> int:
    checked(request(args.state_dir, {"op": "power", "node": args.node, "action": args.action}))
    print("%s: power %s" % (args.node, args.action))
    return 0


def cmd_down(args) -> int:
    state_dir = os.path.abspath(args.state_dir)
    if not os.path.exists(os.path.join(state_dir, daemon.LAB_FILE)):
        raise CliError("no lab in %s" % state_dir)
    info = read_json(os.path.join(state_dir, daemon.LAB_FILE)) or {}
    if daemon_alive(state_dir):
        try:
            request(state_dir, {"op": "down", "keep_logs": args.keep_logs}, timeout_s=30)
        except CliError:
            pass
        deadline = time.monotonic() + 60
        while daemon_alive(state_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        if daemon_alive(state_dir):
            os.kill(info["daemon_pid"], 9)
    # sweep again: also what a crashed daemon left behind
    if os.path.exists(os.path.join(state_dir, daemon.LAB_FILE)):
        result = daemon.cleanup_state_dir(state_dir, keep_logs=args.keep_logs)
        if result["left_mounts"]:
            raise CliError("mounts still busy: %s" % ", ".join(result["left_mounts"]))
    print("gpulab: lab in %s is down" % state_dir)
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m gpulab", description="GPU fleet twin: node twins over SSH and a Kubernetes API twin.")
    default_dir = os.environ.get("GPULAB_STATE_DIR")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir", default=default_dir, required=default_dir is None,
                        help="lab state directory (default: $GPULAB_STATE_DIR)")
    sub = top.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", parents=[common], help="create and boot the nodes (returns when all answer SSH)")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--profile", default="h100x8",
                    help="hardware profile: %s (or an NVIDIA-layer profile name)" % ", ".join(CLI_PROFILES))
    up.add_argument("--driver", help="NVIDIA driver version installed on every node before the first boot (with "
                                     "--gpu-operator: the version the Operator's driver pods load)")
    up.add_argument("--secure-boot", action="store_true", help="nodes boot with UEFI Secure Boot on")
    up.add_argument("--secure-boot-node", action="append", metavar="NODE",
                    help="this node boots with UEFI Secure Boot on (repeatable; --secure-boot: all of them)")
    up.add_argument("--os", action="append", metavar="OS[,OS...]",
                    help="node personalities, given to the nodes in turn: %s (default debian12)"
                         % ", ".join(personality.OS_NAMES))
    up.add_argument("--runfile", action="append", metavar="VERSION",
                    help="also write DIR/runfiles/NVIDIA-Linux-x86_64-VERSION.run (615.71.09 always)")
    up.add_argument("--cuda-repo", action="append", metavar="VERSION",
                    help="the package mirror also serves NVIDIA's CUDA repositories (ubuntu2204, rhel9) with the stub "
                         "driver's packages of VERSION (repeatable; the inventory points nvidia_driver at them)")
    up.add_argument("--api-only", type=int, default=0, metavar="N",
                    help="N more Kubernetes nodes that exist only in the API twin (no SSH)")
    up.add_argument("--mig-strategy", choices=("single", "mixed"), default="single",
                    help="the device plugin's MIG strategy (default single)")
    up.add_argument("--dra", action="store_true",
                    help="the GPU nodes publish DRA ResourceSlices (driver gpu.nvidia.com) instead of nvidia.com/gpu")
    up.add_argument("--cluster-name", default="gpulab")
    up.add_argument("--boot-delay", type=float, default=2.0, help="seconds between shutdown and boot (default 2)")
    up.add_argument("--install-seconds", type=float, default=0.0, metavar="S",
                    help="the runfiles' installs take at least S seconds (a fixed step time for benchmarks; default 0)")
    up.add_argument("--mok-timeout", type=float, default=10.0,
                    help="seconds MokManager waits at boot for `mok-confirm` when keys are staged (default 10)")
    up.add_argument("--first-ip", type=int, default=11, metavar="N",
                    help="first node address 127.0.1.N (default 11; busy addresses are skipped)")
    up.add_argument("--prometheus", action="store_true",
                    help="also run a real Prometheus (Debian's prometheus) on loopback scraping the lab")
    up.add_argument("--prometheus-rules", action="append", metavar="FILE",
                    help="rule file Prometheus loads (repeatable), e.g. files/prometheus/gpu-alerts.yml")
    up.add_argument("--bmc", action="store_true",
                    help="a Redfish BMC per node (HTTPS on loopback, basic auth; lab.json bmc says where)")
    up.add_argument("--dcgm", action="store_true",
                    help="the nodes have DCGM's dcgmi (diag -r 1|2|3 -j; fault dcgm-diag-fail:TEST fails a test)")
    up.add_argument("--scrape-interval", default="1s", help="Prometheus scrape and rule interval (default 1s)")
    up.add_argument("--gpu-operator", action="store_true",
                    help="the NVIDIA GPU Operator owns the driver: its CRDs, ClusterPolicy (driver version --driver), "
                         "driver DaemonSet and upgrade controller; nodes boot without a host driver")
    up.add_argument("--operator-time-scale", type=float, default=1.0, metavar="F",
                    help="multiply the GPU Operator's timers (upgrade requeue 120 s, validation timeout 600 s, "
                         "upgradePolicy timeouts) and the kubelet's crash back-off by F, e.g. 0.01 in tests "
                         "(default 1: the real Operator)")
    up.add_argument("--bastion", action="store_true",
                    help="the nodes boot in a network namespace of their own whose only way in is a bastion "
                         "(user gpuops, ProxyJump in DIR/ssh_config); a direct ssh to a node fails")
    up.add_argument("--containerd", action="append", metavar="VERSION[,VERSION...]",
                    help="the nodes' containerd, given to the nodes in turn: 1.6 the host's (default), 1.7 Debian 13's "
                         "package, 2.1 Debian sid's (apt-get download into $GPULAB_DEB_CACHE, unpacked onto the disks)")
    up.add_argument("--rancher", action="append", metavar="LAYOUT[,LAYOUT...]",
                    help="k3s/RKE2 installed on the nodes, given in turn: %s (their unit, data dir and containerd "
                         "config rendering; the node's containerd is theirs)"
                         % ", ".join(rancherlayout.RANCHER_CHOICES))
    up.add_argument("--nvidia-backend", default="gpulab.nvidia", help=argparse.SUPPRESS)
    up.set_defaults(func=cmd_up)

    status = sub.add_parser("status", parents=[common], help="nodes, their state and faults")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)

    fault = sub.add_parser("fault", parents=[common], help="break a node: reboot-hang, slow-boot, xid:N[:GPU], "
                           "dkms-fail, disk-full, secure-boot-no-key, ssh-drop, driver-mismatch, operator-driver-fail, "
                           "driver-skew, plugin-socket-stale, kubelet-socket-dead (case 3), mig-create-fail, "
                           "dcgm-fail:TEST[:GPU] (up --dcgm), or a cluster fault")
    fault.add_argument("node")
    fault.add_argument("kind")
    fault.add_argument("--at-next-boot", action="store_true",
                       help="arm the fault: it takes effect when the node next boots (e.g. stale-device-plugin "
                            "after a reboot)")
    fault.set_defaults(func=cmd_fault)

    clear = sub.add_parser("clear", parents=[common], help="clear one fault of a node, or all")
    clear.add_argument("node")
    clear.add_argument("kind", nargs="?")
    clear.set_defaults(func=cmd_clear)

    mok = sub.add_parser("mok-confirm", parents=[common], help="the operator at the console accepts the staged MOK key")
    mok.add_argument("node")
    mok.set_defaults(func=cmd_mok_confirm)

    power = sub.add_parser("power", parents=[common], help="out-of-band power control (BMC): on, off, cycle")
    power.add_argument("node")
    power.add_argument("action", choices=("on", "off", "cycle"))
    power.set_defaults(func=cmd_power)

    down = sub.add_parser("down", parents=[common], help="stop everything and remove every mount, process and file")
    down.add_argument("--keep-logs", action="store_true", help="keep events.jsonl and daemon.log")
    down.set_defaults(func=cmd_down)
    return top


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if os.geteuid() != 0:
        print("gpulab: needs root (namespaces, mounts)", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except CliError as error:
        print("gpulab: %s" % error, file=sys.stderr)
        return 1
