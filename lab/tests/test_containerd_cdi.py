"""containerd with CDI on the twin: nodes running Debian's own containerd 1.7 (Debian 13) and 2.1 (Debian sid)
packages (`gpulab up --containerd 1.7,2.1`), the `container_runtime` role's CDI settings validated by each real
binary's `containerd config dump`, and a CDI device request resolved against the spec `cdi_spec` wrote.

The device request is `ctr run --device nvidia.com/gpu=0` on containerd 2.1: ctr 1.7's `--device` takes device file
paths only (the 1.7 ctr binary does not link the CDI library), ctr 2.x resolves a qualified CDI name through
containerd's `pkg/cdi` (the CDI cache over /etc/cdi and /var/run/cdi) into the container's OCI spec, which runc then
creates. The image is an OCI archive built here from Debian's `busybox-static` package (no registry).
"""
from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from conftest import collections_path, start_lab, stop_lab
from gpulab import noderuntime
from oci_image import IMAGE_NAME, build_busybox_archive
from test_role_container_runtime import config_dump, recap, run_role

DRIVER = "550.54.15"
NODE_17 = "gpu-node-01"
NODE_21 = "gpu-node-02"
SPEC_DIRS = ["/etc/cdi", "/var/run/cdi"]
# The host's cgroup hierarchies (v1 controllers and a controller-less v2, as Debian 12 in this CI), mounted at the
# node's /sys/fs/cgroup the way systemd lays them out; mounting a hierarchy again joins the existing one.
CGROUP_MOUNTS = ("mountpoint -q /sys/fs/cgroup || { mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup && "
                 "for line in $(awk '!/^#/ && $2 != 0 {print $1}' /proc/cgroups); do mkdir -p /sys/fs/cgroup/$line && "
                 "mount -t cgroup -o $line cgroup /sys/fs/cgroup/$line || rmdir /sys/fs/cgroup/$line; done; }")


def require_debian_packages():
    """The packages the nodes unpack, from $GPULAB_DEB_CACHE or Debian's archive: skip, saying why, without both."""
    try:
        for version in ("1.7", "2.1"):
            noderuntime.containerd_deb(version)
        noderuntime.fetch_deb("busybox-static", "trixie")
    except noderuntime.PackageError as error:
        pytest.skip("Debian's containerd packages are neither cached in %s nor downloadable: %s"
                    % (noderuntime.deb_cache_dir(), error))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if collections_path() is None:
        pytest.fail("no ansible_collections/gpuops/nvidia tree: run through `make lab-test` (or `make tree`)")
    require_debian_packages()
    state_dir = str(tmp_path_factory.mktemp("cdi") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", DRIVER, "--boot-delay", "0.3",
                    "--containerd", "1.7,2.1")
    try:
        yield lab
    finally:
        stop_lab(lab)


def test_nodes_run_debians_containerd_packages_unpacked_on_their_own_disks(fleet):
    with open(os.path.join(fleet.state_dir, "lab.json")) as stream:
        info = json.load(stream)
    assert [node["containerd"] for node in info["nodes"]] == ["1.7", "2.1"]
    assert info["containerd"]["1.7"]["package_version"].startswith("1.7.")
    assert fleet.ssh(NODE_17, "containerd --version").stdout.split()[2].startswith("1.7.")
    assert fleet.ssh(NODE_21, "containerd --version").stdout.split()[2].startswith("2.1.")
    host = subprocess.run(["containerd", "--version"], capture_output=True, text=True).stdout
    assert host.split()[2].startswith("1.6."), "the package went onto the node's disk, not onto the host"


def test_containerd_17_role_enables_cdi_and_the_real_binary_dump_shows_it(fleet, tmp_path):
    role_vars = {"container_runtime_toolkit_install": False, "container_runtime_restart_allowed": True,
                 "container_runtime_cdi_spec_dirs": SPEC_DIRS}
    done, facts = run_role(fleet, tmp_path, NODE_17, "container_runtime", role_vars, name="cdi17")
    report = facts[NODE_17]["report"]
    assert recap(done, NODE_17)["failed"] == 0
    assert report["containerd_version"].startswith("1.7.")
    assert report["cdi_enabled"] is True and report["validated"] and report["restarted"]
    dump = config_dump(fleet, NODE_17)
    assert "enable_cdi = true" in dump and 'cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]' in dump
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]' in dump
    assert fleet.ssh(NODE_17, "systemctl is-active containerd").stdout.strip() == "active"
    default = fleet.ssh(NODE_17, "containerd --config /dev/null config dump").stdout
    assert "enable_cdi = false" in default, "1.7 ships CDI off: only the role's drop-in turned it on"

    done, facts = run_role(fleet, tmp_path, NODE_17, "container_runtime", role_vars, name="cdi17-again")
    assert recap(done, NODE_17)["changed"] == 0 and not facts[NODE_17]["report"]["restarted"]


def _write_spec_with_cdi_spec(fleet, tmp_path):
    """cdi_spec (generator facts) writes /etc/cdi/nvidia.yaml with a spec-level mount and env of our own."""
    playbook = tmp_path / "spec.yml"
    playbook.write_text(textwrap.dedent("""\
        - hosts: %s
          gather_facts: false
          tasks:
            - gpuops.nvidia.nvidia_driver_facts: {}
            - gpuops.nvidia.cdi_spec:
                path: /etc/cdi/nvidia.yaml
                generator: facts
                facts: "{{ ansible_facts.nvidia_driver }}"
                container_edits:
                  env: [GPUOPS_CDI=injected]
                  mounts:
                    - {hostPath: /usr/bin/nvidia-smi, containerPath: /usr/bin/nvidia-smi,
                       options: [ro, nosuid, nodev, bind]}
        """ % NODE_21))
    fleet.playbook(str(playbook), env={"ANSIBLE_COLLECTIONS_PATH": collections_path()})


def test_containerd_21_resolves_a_cdi_device_request_against_the_spec_cdi_spec_wrote(fleet, tmp_path):
    role_vars = {"container_runtime_toolkit_install": False, "container_runtime_restart_allowed": True,
                 "container_runtime_cdi_spec_manage": False}
    done, facts = run_role(fleet, tmp_path, NODE_21, "container_runtime", role_vars, name="cdi21")
    report = facts[NODE_21]["report"]
    assert report["containerd_version"].startswith("2.1.")
    assert report["cdi_enabled"] is True and report["validated"] and report["restarted"]
    assert "enable_cdi = true" in config_dump(fleet, NODE_21)
    _write_spec_with_cdi_spec(fleet, tmp_path)

    archive = build_busybox_archive(str(tmp_path / "busybox-oci.tar"))
    subprocess.run(["scp", "-q", "-F", os.path.join(fleet.state_dir, "ssh_config"), archive,
                    "%s:/tmp/busybox-oci.tar" % NODE_21], check=True, timeout=60)
    # the twin's /sys has no cgroup mounts of its own; runc needs the host's hierarchies, as on any systemd host
    fleet.ssh(NODE_21, CGROUP_MOUNTS)
    fleet.ssh(NODE_21, "ctr images import --local --snapshotter native /tmp/busybox-oci.tar", timeout=60)
    run = fleet.ssh(NODE_21, "ctr run --rm --snapshotter native --device nvidia.com/gpu=0 %s cdi-probe "
                             "sh -c 'stat -c \"%%n %%F %%t:%%T\" /dev/nvidia*; grep nvidia-smi /proc/mounts; env'"
                    % IMAGE_NAME, check=False, timeout=90)
    try:
        assert run.returncode == 0, run.stdout + run.stderr
        lines = run.stdout.splitlines()
        assert "/dev/nvidia0 character special file c3:0" in lines
        assert "/dev/nvidiactl character special file c3:ff" in lines
        assert not any(line.startswith("/dev/nvidia1 ") for line in lines), "only the requested GPU is injected"
        assert any(" /usr/bin/nvidia-smi " in line and line.split()[3].startswith("ro") for line in lines)
        assert "GPUOPS_CDI=injected" in lines

        unknown = fleet.ssh(NODE_21, "ctr run --rm --snapshotter native --device nvidia.com/gpu=8 %s cdi-none true"
                            % IMAGE_NAME, check=False, timeout=60)
        assert unknown.returncode != 0 and "unresolvable CDI devices nvidia.com/gpu=8" in unknown.stderr, "8 GPUs: 0-7"
    finally:
        fleet.ssh(NODE_21, "ctr tasks kill -s KILL cdi-probe; ctr containers rm cdi-probe; "
                           "ctr containers rm cdi-none; rmdir /sys/fs/cgroup/*/default; umount -R /sys/fs/cgroup",
                  check=False)
