# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.nvidia post-reboot GPU self-check (installed by the node_selfcheck role; runs before kubelet).

Gathers what the node shows (kernel release, /proc/modules, modinfo, mokutil, dkms status, nvidia-smi -L), lets
selfcheck.decide() judge it, tries the one repair it names (dkms autoinstall, modprobe nvidia) when allowed,
judges again, and writes the verdict to the state file and, when a kubelet kubeconfig is there, to the node's
annotation gpuops.nvidia/selfcheck. Python 3 standard library only.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.request

LIB_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, LIB_DIR)

import selfcheck  # noqa: E402  (selfcheck.py and driver_state.py are installed beside this program)

DEFAULT_CONFIG = "/etc/gpuops/selfcheck.json"


def log(message):
    sys.stderr.write("gpuops-selfcheck: %s\n" % message)
    sys.stderr.flush()


def run(argv, timeout):
    """(rc, stdout+stderr); rc 127 when the program is not installed, 124 on timeout."""
    if not shutil.which(argv[0]):
        return 127, "%s: not installed" % argv[0]
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                              universal_newlines=True, env=dict(os.environ, LC_ALL="C"), check=False)
    except subprocess.TimeoutExpired:
        return 124, "%s: timed out after %ss" % (" ".join(argv), timeout)
    return proc.returncode, proc.stdout


def read(path):
    try:
        with open(path) as stream:
            return stream.read()
    except OSError:
        return ""


def gather(config):
    timeout = config.get("command_timeout_s", 300)
    release = os.uname().release
    lsmod_rc, modules = run(["lsmod"], timeout)  # lsmod reads /proc/modules
    if lsmod_rc != 0:
        modules = read("/proc/modules")
    loaded = re.search(r"^nvidia ", modules, re.M) is not None
    _rc, modinfo = run(["modinfo", "-k", release, "nvidia"], timeout)
    sb_rc, sb_state = run(["mokutil", "--sb-state"], timeout)
    enrolled = None
    if sb_rc != 127:
        _rc, enrolled = run(["mokutil", "--list-enrolled"], timeout)
    dkms_rc, dkms = run(["dkms", "status"], timeout)
    smi_list = None
    if loaded and config.get("mig_layout"):
        smi_rc, smi_list = run(["nvidia-smi", "-L"], timeout)
        smi_list = smi_list if smi_rc == 0 else None
    return selfcheck.node_facts(release, modules, modinfo, sb_state_text=None if sb_rc == 127 else sb_state,
                                enrolled_text=enrolled, dkms_text=None if dkms_rc == 127 else dkms,
                                smi_list_text=smi_list, mig_layout_wanted=config.get("mig_layout"))


def repair(decision, config):
    plan = decision["repair"]
    timeout = config.get("command_timeout_s", 300)
    attempt = {"action": plan["action"], "argv": plan["argv"]}
    attempt["rc"], output = run(plan["argv"], timeout)
    if attempt["rc"] == 0 and plan.get("then"):
        attempt["then"] = plan["then"]
        attempt["rc"], more = run(plan["then"], timeout)
        output += more
    attempt["output_tail"] = output[-2000:]
    log("repair %s: rc=%s" % (plan["action"], attempt["rc"]))
    return attempt


def kubeconfig_fields(text):
    """server, certificate-authority, client-certificate, client-key of a kubelet kubeconfig (file paths, as
    kubeadm, k3s and RKE2 write them); inline *-data fields are not read."""
    fields = {}
    for key in ("server", "certificate-authority", "client-certificate", "client-key"):
        match = re.search(r"^\s*%s:\s*(\S+)\s*$" % re.escape(key), text, re.M)
        if match:
            fields[key] = match.group(1).strip("'\"")
    return fields


def annotate(result, config):
    """PATCH the node's gpuops.nvidia/selfcheck annotation with the kubelet's credentials."""
    path = next((p for p in config.get("kubeconfigs") or [] if os.path.exists(p)), None)
    if not path:
        return {"written": False, "reason": "no kubelet kubeconfig on this node"}
    fields = kubeconfig_fields(read(path))
    missing = [key for key in ("server", "client-certificate", "client-key") if not fields.get(key)]
    missing += [fields[key] for key in ("client-certificate", "client-key")
                if fields.get(key) and not os.path.exists(fields[key])]
    if missing:
        return {"written": False, "kubeconfig": path, "reason": "kubeconfig lacks %s" % ", ".join(missing)}
    node = config.get("node_name") or socket.gethostname().lower()
    value = selfcheck.summary(result)
    body = json.dumps({"metadata": {"annotations": {selfcheck.ANNOTATION: value,
                                                    selfcheck.ANNOTATION + "-at": result["checked_at"]}}})
    context = ssl.create_default_context(cafile=fields.get("certificate-authority")
                                         if os.path.exists(fields.get("certificate-authority", "/-")) else None)
    context.load_cert_chain(fields["client-certificate"], fields["client-key"])
    request = urllib.request.Request("%s/api/v1/nodes/%s" % (fields["server"].rstrip("/"), node),
                                     data=body.encode(), method="PATCH",
                                     headers={"Content-Type": "application/merge-patch+json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=config.get("api_timeout_s", 10)) as answer:
            return {"written": True, "kubeconfig": path, "node": node, "value": value, "http_status": answer.status}
    except Exception as error:  # the verdict stays in the state file; the annotation is best effort
        return {"written": False, "kubeconfig": path, "node": node, "reason": str(error)[:300]}


def write_state(path, result):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as stream:
        json.dump(result, stream, indent=2, sort_keys=True)
        stream.write("\n")
    os.replace(tmp, path)


def main(argv):
    config_path = argv[argv.index("--config") + 1] if "--config" in argv else DEFAULT_CONFIG
    config = json.loads(read(config_path) or "{}")
    first = selfcheck.decide(gather(config))
    result = dict(first)
    attempt = None
    if first["status"] == "repairable" and config.get("repair", True):
        attempt = repair(first, config)
        result = selfcheck.decide(gather(config))
    result.update(checked_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  boot_id=read("/proc/sys/kernel/random/boot_id").strip(), kernel_release=os.uname().release,
                  found=first["code"], attempt=attempt,
                  repaired=bool(attempt and attempt["rc"] == 0 and result["status"] == "ok"))
    if result["repaired"]:
        result.update(status="repaired", code=first["code"])  # what was found and repaired stays named
    result["annotation"] = annotate(result, config)
    write_state(config.get("state_file") or "/var/lib/gpuops/selfcheck.json", result)
    log("verdict %s" % selfcheck.summary(result))
    return 0 if result["status"] in ("ok", "repaired") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
