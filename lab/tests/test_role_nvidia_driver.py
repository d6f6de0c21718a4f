"""The nvidia_driver role on a Secure Boot twin node over SSH, from a bare node to a loaded, signed driver.

One fresh 1-node lab with Secure Boot on (nouveau loaded, no MOK). The role gets the runfile from the lab's
HTTP mirror, whose URL and SHA256SUMS `gpulab up` wrote into the inventory: the good request names only the
version and the MOK password. First the bad requests, which must fail with a clear message and leave the node
as it was. Then the runbook: run 1 makes the signing key, points DKMS at it,
stages it with `mokutil --import` and blacklists nouveau, deferring the install (nouveau holds the GPUs);
reboot, the operator confirms the key at the console (`gpulab mok-confirm`); run 2 installs the driver (DKMS
builds and signs the module with the enrolled key); reboot: `nvidia_driver_facts` shows the module loaded and
signed by the enrolled key; run 3 changes nothing.
"""
from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import threading
import time

import pytest

from conftest import start_lab, stop_lab
from roles_on_twin import recap, run_role
from test_node_driver import driver_facts

NODE = "gpu-node-01"
DRIVER = "615.71.09"
PASSWORD = "one-time-2am"
SUBJECT = "gpuops.nvidia module signing key"
RESULT = "nvidia_driver_result"


def sha256_file(path: str) -> str:
    with open(path, "rb") as stream:
        return hashlib.sha256(stream.read()).hexdigest()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def bad_mirror(tmp_path_factory):
    """A loopback HTTP server other than the lab's: the runfile and a SHA256SUMS listing it with a wrong digest."""
    root = str(tmp_path_factory.mktemp("mirror"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             lambda *args: QuietHandler(*args, directory=root))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"root": root, "url": "http://127.0.0.1:%d" % server.server_address[1]}
    server.shutdown()


def node_snapshot(lab) -> str:
    """What a failed request must leave as it was."""
    return lab.ssh(NODE, "ls -a /var/lib/gpuops/mok /etc/modprobe.d /etc/dkms/framework.conf.d 2>&1; "
                         "mokutil --list-new; ls /usr/bin/nvidia-smi 2>&1", check=False).stdout


def wait_and_confirm(lab) -> None:
    since = time.time()
    lab.ssh(NODE, "reboot")
    lab.wait_status(NODE, "mok-manager")
    lab.gpulab("mok-confirm", NODE)
    lab.wait_event(NODE, "up", since)
    lab.wait_status(NODE, "up")


@pytest.fixture(scope="module")
def flow(tmp_path_factory, bad_mirror):
    state_dir = str(tmp_path_factory.mktemp("sbrole") / "state")
    lab = start_lab(state_dir, "--nodes", "1", "--secure-boot", "--boot-delay", "0.3", "--mok-timeout", "30")
    work = str(tmp_path_factory.mktemp("sbrole-play"))
    runfile = os.path.join(state_dir, "runfiles", "NVIDIA-Linux-x86_64-%s.run" % DRIVER)
    shutil.copy(runfile, bad_mirror["root"])
    with open(os.path.join(bad_mirror["root"], "SHA256SUMS"), "w") as stream:
        stream.write("%s  NVIDIA-Linux-x86_64-%s.run\n" % ("0" * 64, DRIVER))
    good = {"nvidia_driver_version": DRIVER, "nvidia_driver_mok_password": PASSWORD}
    steps = {"runfile_sha256": sha256_file(runfile)}
    try:
        before = node_snapshot(lab)
        bad = {
            "malformed_version": dict(good, nvidia_driver_version="latest"),
            "unknown_method": dict(good, nvidia_driver_method="tarball"),
            "checksum_mismatch": dict(good, nvidia_driver_runfile_src=runfile,
                                      nvidia_driver_runfile_checksum="sha256:" + "ab" * 32),
            # the lab mirror's URL for a version it does not have
            "url_404": dict(good, nvidia_driver_version="999.99.99", nvidia_driver_runfile_checksum="sha256:" + "cd" * 32),
            "sums_mismatch": dict(good, nvidia_driver_runfile_url=bad_mirror["url"] + "/" + os.path.basename(runfile),
                                  nvidia_driver_runfile_checksum="sha256:%s/SHA256SUMS" % bad_mirror["url"],
                                  nvidia_driver_runfile_checksum_trust_mirror=True),
            # the same, not trusted: the sums beside the runfile prove nothing the mirror could not fake
            "sums_on_mirror": dict(good, nvidia_driver_runfile_url=bad_mirror["url"] + "/" + os.path.basename(runfile),
                                   nvidia_driver_runfile_checksum="sha256:%s/SHA256SUMS" % bad_mirror["url"],
                                   nvidia_driver_runfile_checksum_trust_mirror=False),
        }
        steps["bad"] = {name: run_role(lab, "nvidia_driver", role_vars, work) for name, role_vars in bad.items()}
        steps["after_bad"] = node_snapshot(lab)
        steps["before"] = before
        steps["check_mode"] = run_role(lab, "nvidia_driver", good, work, result_var=RESULT, check_mode=True)
        steps["after_check_mode"] = node_snapshot(lab)
        steps["run1"] = run_role(lab, "nvidia_driver", good, work, result_var=RESULT)
        steps["staged"] = lab.ssh(NODE, "mokutil --list-new").stdout
        steps["key_mode"] = lab.ssh(NODE, "stat -c %a /var/lib/gpuops/mok/MOK.priv").stdout.strip()
        steps["mok_der_sha1"] = lab.ssh(NODE, "sha1sum /var/lib/gpuops/mok/MOK.der").stdout.split()[0]
        steps["dkms_conf"] = lab.ssh(NODE, "cat /etc/dkms/framework.conf.d/gpuops-mok.conf").stdout
        steps["key_eku"] = lab.ssh(NODE, "openssl x509 -inform DER -in /var/lib/gpuops/mok/MOK.der -noout -text").stdout
        wait_and_confirm(lab)
        steps["run2"] = run_role(lab, "nvidia_driver", good, work, result_var=RESULT)
        steps["record"] = lab.ssh(NODE, "cat /var/lib/gpuops/nvidia_driver.json").stdout
        lab.reboot_from_inside(NODE)
        steps["facts"] = driver_facts(lab)
        steps["run3"] = run_role(lab, "nvidia_driver", good, work, result_var=RESULT)
        steps["boots"] = lab.node_status(NODE)["boots"]
        yield steps
    finally:
        stop_lab(lab)


def failure_text(run: dict) -> str:
    assert run["rc"] != 0, run["output"][-2000:]
    return run["output"][run["output"].index("fatal: [%s]" % NODE):]


def test_a_malformed_version_is_refused_by_name(flow):
    text = failure_text(flow["bad"]["malformed_version"])
    assert "nvidia_driver_version 'latest' is not a full NVIDIA driver version" in text
    assert "Nothing was changed" in text


def test_an_unknown_method_is_refused_with_the_valid_ones(flow):
    text = failure_text(flow["bad"]["unknown_method"])
    assert "nvidia_driver_method" in text and "runfile, package" in text and "tarball" in text


def test_a_copied_runfile_with_the_wrong_checksum_is_removed_and_refused(flow):
    text = failure_text(flow["bad"]["checksum_mismatch"])
    assert "checksum mismatch" in text and "ab" * 32 in text and flow["runfile_sha256"] in text
    assert "The copy was removed; the driver was not changed." in text


def test_a_runfile_url_that_404s_is_refused_with_the_url_and_the_reason(flow):
    text = failure_text(flow["bad"]["url_404"])
    assert "the runfile could not be fetched from http://127.0.0.1:" in text and "999.99.99.run" in text
    assert "404" in text and "The driver was not changed." in text


def test_a_runfile_that_does_not_match_its_sha256sums_is_refused(flow):
    text = failure_text(flow["bad"]["sums_mismatch"])
    assert "could not be fetched" in text and "SHA256SUMS" in text and "checksum" in text.lower()


def test_a_checksum_served_by_the_runfiles_own_mirror_is_refused_before_anything_changes(flow):
    text = failure_text(flow["bad"]["sums_on_mirror"])
    assert "nvidia_driver_runfile_checksum is a URL on the runfile's own host (127.0.0.1)" in text
    assert "nvidia_driver_runfile_checksum_trust_mirror: true" in text and "Nothing was changed" in text


def test_bad_requests_and_check_mode_leave_the_node_as_it_was(flow):
    assert flow["after_bad"] == flow["before"]
    assert flow["after_check_mode"] == flow["before"]
    assert flow["check_mode"]["rc"] == 0, flow["check_mode"]["output"][-3000:]


def test_first_run_stages_the_key_points_dkms_at_it_and_defers_the_install_behind_nouveau(flow):
    run = flow["run1"]
    assert run["rc"] == 0, run["output"][-3000:]
    result = run["results"][NODE]
    assert result["mok_enrollment_pending"] is True and result["reboot_required"] is True
    assert result["install_deferred"].startswith("nouveau is loaded")
    assert result["next_boot"] == {"driver_version": DRIVER, "kernel_module_type": "open", "signer": SUBJECT}
    assert SUBJECT in flow["staged"] and result["mok_fingerprint"] == flow["mok_der_sha1"]
    assert flow["key_mode"] == "600"
    assert "mok_signing_key=/var/lib/gpuops/mok/MOK.priv" in flow["dkms_conf"]
    assert "mok_certificate=/var/lib/gpuops/mok/MOK.der" in flow["dkms_conf"]
    assert "Code Signing" in flow["key_eku"]


def test_the_password_never_shows_in_the_output(flow):
    for name in ("run1", "run2", "run3", "check_mode"):
        assert PASSWORD not in flow[name]["output"]


def test_after_confirmation_the_install_runs_and_records_what_it_did(flow):
    run = flow["run2"]
    assert run["rc"] == 0, run["output"][-3000:]
    result = run["results"][NODE]
    assert result["mok_enrollment_pending"] is False and result["install_deferred"] is None
    assert result["reboot_required"] is True and result["changed"] is True
    assert '"version": "%s"' % DRIVER in flow["record"] and '"method": "runfile"' in flow["record"]
    assert flow["runfile_sha256"] in flow["record"]


def test_a_node_that_can_build_the_module_skips_the_package_manager(flow):
    # the twin's node has DKMS, make, a compiler, the C library and the kernel headers (kernel.build_tools_missing
    # is empty): the build prerequisites task must not run apt at all
    output = flow["run2"]["output"]
    task = output[output.index("TASK [gpuops.nvidia.nvidia_driver : Build prerequisites"):]
    task = task[:task.index("TASK [", 1)]
    assert "skipping: [%s]" % NODE in task, task


def test_after_the_reboot_the_module_is_loaded_and_signed_by_the_enrolled_key(flow):
    facts = flow["facts"]
    if facts is None:
        pytest.skip("no ansible_collections/gpuops/nvidia with nvidia_driver_facts found")
    assert facts["kernel_module"]["loaded"] is True and facts["kernel_module"]["version"] == DRIVER
    assert facts["kernel_module"]["signer"] == SUBJECT
    assert facts["kernel_module"]["flavor"] == "open"
    assert [key["fingerprint"] for key in facts["mok"]["enrolled"]] == [flow["mok_der_sha1"]]
    assert facts["mok"]["pending"] == []
    # built and signed by DKMS, which the drop-in points at the enrolled key
    assert [entry["state"] for entry in facts["dkms"]] == ["installed"]
    assert "/updates/dkms/" in facts["kernel_module"]["filename"]
    assert facts["userspace"]["driver_version"] == DRIVER and facts["version_mismatch"] is False
    assert not [entry for entry in facts["diagnosis"] if entry["severity"] in ("critical", "error")]


def test_a_rerun_on_the_finished_node_changes_nothing(flow):
    run = flow["run3"]
    assert run["rc"] == 0, run["output"][-3000:]
    assert recap(run["output"], NODE)["changed"] == 0
    result = run["results"][NODE]
    assert result["changed"] is False and result["reboot_required"] is False
    assert result["mok_enrollment_pending"] is False
    # two reboots in all: nouveau out + key enrolled, then the new module loaded
    assert flow["boots"] == 3


# ------------------------------------------------------------------------------------------- package method

@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """A node whose only apt source is the twin's repository of the stub driver packages (the CUDA repository's
    layout for Debian 12): run 1 blacklists nouveau, reboot, run 2 installs and holds, reboot, run 3 no change."""
    state_dir = str(tmp_path_factory.mktemp("pkgrole") / "state")
    lab = start_lab(state_dir, "--nodes", "1", "--boot-delay", "0.3")
    work = str(tmp_path_factory.mktemp("pkgrole-play"))
    role_vars = {"nvidia_driver_version": DRIVER, "nvidia_driver_method": "package"}
    steps = {}
    try:
        lab.ssh(NODE, "rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*; echo '%s' > "
                      "/etc/apt/sources.list.d/gpulab.list" % lab.info["apt_repo"])
        steps["run1"] = run_role(lab, "nvidia_driver", role_vars, work, result_var=RESULT)
        lab.reboot_from_inside(NODE)
        steps["run2"] = run_role(lab, "nvidia_driver", role_vars, work, result_var=RESULT)
        steps["holds"] = lab.ssh(NODE, "dpkg --get-selections").stdout
        steps["record"] = lab.ssh(NODE, "cat /var/lib/gpuops/nvidia_driver.json").stdout
        lab.reboot_from_inside(NODE)
        steps["smi"] = lab.ssh(NODE, "nvidia-smi -L", check=False)
        steps["run3"] = run_role(lab, "nvidia_driver", role_vars, work, result_var=RESULT)
        yield steps
    finally:
        stop_lab(lab)


def test_packages_wait_for_nouveau_then_install_at_the_version_and_are_held(packages):
    assert packages["run1"]["rc"] == 0, packages["run1"]["output"][-3000:]
    assert packages["run1"]["results"][NODE]["install_deferred"].startswith("nouveau is loaded")
    run = packages["run2"]
    assert run["rc"] == 0, run["output"][-3000:]
    assert run["results"][NODE]["reboot_required"] is True and run["results"][NODE]["changed"] is True
    held = {line.split()[0] for line in packages["holds"].splitlines() if line.split()[-1] == "hold"}
    assert held == {"nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-smi", "libnvidia-ml1", "libcuda1",
                    "firmware-nvidia-gsp"}
    assert '"method": "package"' in packages["record"] and '"version": "%s"' % DRIVER in packages["record"]


def test_packages_load_after_the_reboot_and_a_rerun_changes_nothing(packages):
    assert packages["smi"].returncode == 0 and packages["smi"].stdout.count("GPU ") == 8
    run = packages["run3"]
    assert run["rc"] == 0, run["output"][-3000:]
    assert recap(run["output"], NODE)["changed"] == 0
    assert run["results"][NODE]["reboot_required"] is False
