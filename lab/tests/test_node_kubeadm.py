"""A node twin looks like a kubeadm-joined node to its host side: the kubelet's device-plugin directory with its
registration socket, an enabled and running kubelet unit, kubeadm's kubeconfig and flag files — checked over SSH as
an operator (or the collection's precheck) checks a real node."""
from __future__ import annotations

CHECK = ("test -S /var/lib/kubelet/device-plugins/kubelet.sock && echo socket; "
         "systemctl is-active kubelet; systemctl is-enabled kubelet; "
         "grep -c 'kind: Config' /etc/kubernetes/kubelet.conf; "
         "grep -o 'container-runtime-endpoint=[^ ]*' /var/lib/kubelet/kubeadm-flags.env; "
         "pgrep -x kubelet >/dev/null && echo process")


def test_kubelet_layout_and_unit_as_kubeadm_leaves_them(lab):
    node = lab.node_names[0]
    out = lab.ssh(node, CHECK).stdout.split()
    assert out == ["socket", "active", "enabled", "1",
                   "container-runtime-endpoint=unix:///run/containerd/containerd.sock", "process"]
    show = lab.ssh(node, "systemctl show kubelet").stdout
    assert "ActiveState=active" in show and "LoadState=loaded" in show
    assert "MainPID=0" not in show
    # the systemd unit and kubeadm's drop-in, where the packages put them
    lab.ssh(node, "test -f /lib/systemd/system/kubelet.service && "
                  "test -f /etc/systemd/system/kubelet.service.d/10-kubeadm.conf")


def test_ansible_service_facts_sees_kubelet_running(lab):
    node = lab.node_names[1]
    done = lab.ansible(node, "ansible.builtin.service_facts")
    assert '"kubelet.service"' in done.stdout
    facts_line = done.stdout[done.stdout.index('"kubelet.service"'):]
    assert '"state": "running"' in facts_line[:400]


def test_stopped_kubelet_is_inactive_and_an_enabled_one_starts_at_boot(lab):
    node = lab.node_names[2]
    lab.ssh(node, "systemctl stop kubelet")
    assert lab.ssh(node, "systemctl is-active kubelet", check=False).stdout.strip() == "inactive"
    # the socket file stays after the kubelet stopped, as the real kubelet leaves it
    lab.ssh(node, "test -S /var/lib/kubelet/device-plugins/kubelet.sock")
    lab.ssh(node, "echo '# operator was here' >> /etc/kubernetes/kubelet.conf")
    lab.reboot_from_inside(node)
    assert lab.ssh(node, CHECK).stdout.split()[:3] == ["socket", "active", "enabled"]
    # the node's disk keeps what the operator changed: kubeadm files are written once
    assert "operator was here" in lab.ssh(node, "cat /etc/kubernetes/kubelet.conf").stdout
    # a disabled kubelet does not come back at boot
    lab.ssh(node, "systemctl disable kubelet && systemctl stop kubelet")
    lab.reboot_from_inside(node)
    assert lab.ssh(node, "systemctl is-active kubelet", check=False).stdout.strip() == "inactive"
    lab.ssh(node, "systemctl enable kubelet && systemctl start kubelet")
    assert lab.ssh(node, "systemctl is-active kubelet").stdout.strip() == "active"
