"""A node twin looks like a host to an operator: own hostname, own disk, own views, reboots like a host."""
from __future__ import annotations

import os
import textwrap
import time

import yaml


def test_each_node_answers_ssh_with_its_own_hostname(lab):
    for name in lab.node_names:
        assert lab.ssh(name, "hostname").stdout.strip() == name
        assert lab.ssh(name, "cat /etc/hostname").stdout.strip() == name


def test_inventory_groups_nodes_with_cluster_name_and_ansible_pings_them(lab):
    with open(os.path.join(lab.state_dir, "inventory.yml")) as stream:
        inventory = yaml.safe_load(stream)
    assert inventory["all"]["vars"]["gpuops_cluster_name"] == "gpulab"
    assert inventory["all"]["vars"]["gpuops_kubeconfig"] == os.path.join(lab.state_dir, "kubeconfig")
    hosts = inventory["all"]["children"]["gpu_nodes"]["hosts"]
    assert sorted(hosts) == ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
    done = lab.ansible("gpu_nodes", "ping")
    assert done.stdout.count("SUCCESS") == 3


def test_ansible_sees_python3_and_the_node_hostname_in_facts(lab):
    done = lab.ansible("gpu-node-02", "setup", "filter=ansible_hostname,ansible_python_version")
    assert '"ansible_hostname": "gpu-node-02"' in done.stdout


def test_file_written_on_one_node_is_not_on_another_nor_on_the_host(lab):
    marker = "/root/isolation-%d" % os.getpid()
    lab.ssh("gpu-node-01", "echo node-01 > %s && mkdir -p /etc/isolation.d && touch /etc/isolation.d/x" % marker)
    assert lab.ssh("gpu-node-01", "cat %s" % marker).stdout.strip() == "node-01"
    assert lab.ssh("gpu-node-02", "test -e %s" % marker, check=False).returncode == 1
    assert lab.ssh("gpu-node-02", "test -e /etc/isolation.d", check=False).returncode == 1
    assert not os.path.exists(marker)
    assert not os.path.exists("/etc/isolation.d")


def test_node_cannot_see_or_signal_host_processes(lab):
    processes = lab.ssh("gpu-node-01", "ps -eo pid,comm --no-headers").stdout.split("\n")
    commands = {line.split()[1] for line in processes if line.strip()}
    # the node's own: its init, sshd, the kubelet stand-in (a kubeadm node), what a test started (containerd)
    assert commands <= {"systemd", "sshd", "kubelet", "bash", "ps", "sh", "containerd"}, commands
    assert lab.ssh("gpu-node-01", "kill -0 %d" % os.getpid(), check=False).returncode != 0


def test_node_views_are_its_own_and_host_views_stay_unchanged(lab):
    with open("/proc/sys/kernel/random/boot_id") as stream:
        host_boot_id = stream.read().strip()
    host_dev = sorted(os.listdir("/dev"))
    host_pci = sorted(os.listdir("/sys/bus/pci/devices"))
    node_boot_id = lab.ssh("gpu-node-01", "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    assert node_boot_id == lab.node_status("gpu-node-01")["boot_id"] != host_boot_id
    node_dev = lab.ssh("gpu-node-01", "ls /dev").stdout.split()
    assert {"null", "zero", "urandom", "pts", "ptmx"} <= set(node_dev)
    assert "vda" not in node_dev and "vda" in host_dev
    assert lab.ssh("gpu-node-01", "echo ok > /dev/null && head -c4 /dev/urandom | wc -c").stdout.strip() == "4"
    # the host keeps its own views whatever the nodes mounted
    with open("/proc/sys/kernel/random/boot_id") as stream:
        assert stream.read().strip() == host_boot_id
    assert sorted(os.listdir("/dev")) == host_dev
    assert sorted(os.listdir("/sys/bus/pci/devices")) == host_pci
    with open("/proc/self/mountinfo") as stream:
        host_mounts = stream.read()
    assert " overlay " not in host_mounts and "/proc/driver" not in host_mounts


def test_ssh_session_gets_a_pty_like_an_operator_terminal(lab):
    done = lab.ssh("gpu-node-03", "tty", check=False)
    assert done.returncode == 1  # no pty without -t
    import subprocess
    done = subprocess.run(["ssh", "-F", os.path.join(lab.state_dir, "ssh_config"), "-tt", "-o", "ControlMaster=no",
                           "gpu-node-03", "tty"], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip().startswith("/dev/pts/")


def test_ansible_reboot_changes_boot_id_and_keeps_the_disk(lab, tmp_path):
    node = "gpu-node-02"
    boot_id_before = lab.node_status(node)["boot_id"]
    lab.ssh(node, "echo kept > /root/survives-reboot && echo gone > /tmp/tmpfs-file")
    playbook = tmp_path / "reboot.yml"
    playbook.write_text(textwrap.dedent("""\
        - hosts: gpu-node-02
          gather_facts: false
          tasks:
            - ansible.builtin.reboot:
                reboot_timeout: 120
              register: rebooted
            - ansible.builtin.assert:
                that: rebooted.rebooted
        """))
    since = time.time()
    lab.playbook(str(playbook))
    boot_id_after = lab.ssh(node, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    assert boot_id_after != boot_id_before
    assert lab.ssh(node, "cat /root/survives-reboot").stdout.strip() == "kept"
    assert lab.ssh(node, "test -e /tmp/tmpfs-file", check=False).returncode == 1
    kinds = [event["kind"] for event in lab.events(node=node, since=since)]
    assert kinds[:5] == ["power-request", "shutting-down", "down", "booting", "up"], kinds


def test_shutdown_r_now_from_a_shell_reboots_the_node(lab):
    node = "gpu-node-03"
    before = lab.node_status(node)
    since = time.time()
    done = lab.ssh(node, "shutdown -r now")
    assert "going down for reboot" in done.stdout
    lab.wait_event(node, "up", since)
    after = lab.wait_status(node, "up")
    assert after["boots"] == before["boots"] + 1 and after["boot_id"] != before["boot_id"]
    request = lab.events(node=node, kind="power-request", since=since)[0]
    assert request["action"] == "reboot" and request["program"] == "shutdown"


def test_poweroff_keeps_the_node_down_until_power_on(lab):
    node = "gpu-node-03"
    since = time.time()
    lab.ssh(node, "poweroff")
    lab.wait_status(node, "off")
    assert lab.ssh(node, "true", check=False).returncode == 255
    lab.gpulab("power", node, "on")
    lab.wait_status(node, "up")
    assert lab.events(node=node, kind="off", since=since)


def test_status_lists_every_node_up_with_ssh(lab):
    output = lab.gpulab("status").stdout
    for name in lab.node_names:
        assert name in output
    assert output.count(" up ") >= 3


def test_every_boot_is_in_the_event_log_with_its_boot_id(lab):
    # the node's status shows a new boot a moment before the daemon appends its "up" event: under load (a CI run)
    # a boot an earlier test started can be between the two, so the log gets a few seconds to catch up
    deadline = time.monotonic() + 15
    while True:
        ups = lab.events(kind="up")
        latest = {name: [event["boot_id"] for event in ups if event["node"] == name] for name in lab.node_names}
        current = {name: lab.node_status(name)["boot_id"] for name in lab.node_names}
        if all(latest[name] and latest[name][-1] == current[name] for name in lab.node_names):
            break
        assert time.monotonic() < deadline, (latest, current)
        time.sleep(0.5)
    assert all(event["boot_s"] < 10 for event in ups)


def test_second_up_on_a_running_state_dir_is_refused(lab):
    done = lab.gpulab("up", "--nodes", "1", check=False)
    assert done.returncode == 1 and "already runs" in done.stderr


def test_a_new_node_home_holds_no_host_files(lab):
    marker = "/root/.gpulab-host-only-%d" % os.getpid()
    with open(marker, "w") as stream:
        stream.write("host secret\n")
    try:
        assert lab.ssh("gpu-node-01", "test -e %s" % marker, check=False).returncode == 1
        assert lab.ssh("gpu-node-01", "test -e /root/.ssh/authorized_keys", check=False).returncode == 1
        assert lab.ssh("gpu-node-01", "test -f /root/.bashrc && test -f /root/.profile", check=False).returncode == 0
    finally:
        os.unlink(marker)


def test_ansible_restarts_a_systemd_service_and_it_runs_again_after_a_reboot(lab):
    if not os.path.exists("/usr/bin/containerd"):
        import pytest
        pytest.skip("containerd is not installed on this machine (apt-get install containerd)")
    node = "gpu-node-03"
    lab.ansible(node, "ansible.builtin.systemd", "name=containerd state=restarted daemon_reload=true")
    assert lab.ssh(node, "systemctl is-active containerd").stdout.strip() == "active"
    assert "ansible_service_mgr\": \"systemd" in lab.ansible(node, "setup", "filter=ansible_service_mgr").stdout
    first_pid = lab.ssh(node, "systemctl show -p MainPID containerd").stdout
    lab.reboot_from_inside(node)
    assert lab.ssh(node, "systemctl is-active containerd").stdout.strip() == "active"
    assert lab.ssh(node, "systemctl show -p MainPID containerd").stdout != first_pid
    lab.ssh(node, "systemctl stop containerd")
    done = lab.ssh(node, "systemctl is-active containerd", check=False)
    assert done.returncode == 3 and done.stdout.strip() == "inactive"
    missing = lab.ansible(node, "ansible.builtin.systemd", "name=no-such-unit state=started", check=False)
    assert missing.returncode != 0 and "Could not find the requested service no-such-unit" in missing.stdout
