"""The container_runtime and device_plugin roles over the twin: real ansible-playbook, real SSH, the nodes' real
containerd (`containerd config dump`, restarted through the node's systemctl), the Kubernetes API twin.

The twin has no nvidia-container-toolkit package yet, so the toolkit install is off and the CDI spec comes from the
driver facts (the nodes run a driver).
"""
from __future__ import annotations

import hashlib
import json
import os
import textwrap

import pytest

from conftest import REPO_DIR, collections_path, start_lab, stop_lab

DRIVER = "550.54.15"
K3S_FIXTURE = os.path.join(REPO_DIR, "tests", "unit", "fixtures", "containerd",
                           "k3s-imports_generated_config_CONSTRUCTED.toml")
K3S_DIR = "/var/lib/rancher/k3s/agent/etc/containerd"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if collections_path() is None:
        pytest.fail("no ansible_collections/gpuops/nvidia tree: run through `make lab-test` (or `make tree`)")
    state_dir = str(tmp_path_factory.mktemp("runtime") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--driver", DRIVER, "--boot-delay", "0.3")
    try:
        yield lab
    finally:
        stop_lab(lab)


def run_role(lab, tmp_path, hosts, role, role_vars, name="play", check=True, check_mode=False):
    """Run one role in a playbook; returns (ansible-playbook result, {host: facts the play recorded})."""
    out_dir = tmp_path / ("out-" + name)
    out_dir.mkdir(exist_ok=True)
    record = {"container_runtime": "{{ {'pending': container_runtime_restart_pending, "
                                   "'report': container_runtime_report} | to_json }}",
              "device_plugin": "{{ {'applied': device_plugin_applied | default({})} | to_json }}"}[role]
    playbook = tmp_path / ("%s.yml" % name)
    playbook.write_text(textwrap.dedent("""\
        - hosts: {hosts}
          gather_facts: false
          check_mode: {check_mode}
          roles:
            - role: gpuops.nvidia.{role}
              vars: {role_vars}
          post_tasks:
            - name: Record the facts the role set
              ansible.builtin.copy:
                content: "{record}"
                dest: "{out_dir}/{{{{ inventory_hostname }}}}.json"
                mode: "0644"
              delegate_to: localhost
              changed_when: false
              check_mode: false
        """).format(hosts=hosts, role=role, role_vars=json.dumps(role_vars), record=record.replace('"', '\\"'),
                    out_dir=out_dir, check_mode=json.dumps(check_mode)))
    env = {"ANSIBLE_COLLECTIONS_PATH": collections_path()}
    done = lab.playbook(str(playbook), check=check, env=env)
    facts = {path[:-5]: json.loads((out_dir / path).read_text()) for path in os.listdir(out_dir)}
    return done, facts


def recap(done, host):
    """The PLAY RECAP counters of host, e.g. {'ok': 7, 'changed': 0, ...}."""
    for line in done.stdout.splitlines():
        if line.startswith(host + " ") and "ok=" in line:
            return {key: int(value) for key, value in (item.split("=") for item in line.split(":", 1)[1].split())}
    raise AssertionError("no recap for %s in:\n%s" % (host, done.stdout))


def config_dump(lab, node, config="/etc/containerd/config.toml"):
    return lab.ssh(node, "containerd --config %s config dump" % config).stdout


def test_containerd_is_configured_validated_restarted_and_a_rerun_changes_nothing(fleet, tmp_path):
    node = "gpu-node-01"
    before = fleet.ssh(node, "cat /etc/containerd/config.toml").stdout
    role_vars = {"container_runtime_toolkit_install": False, "container_runtime_restart_allowed": True}
    done, facts = run_role(fleet, tmp_path, node, "container_runtime", role_vars, name="first")
    report = facts[node]["report"]
    assert recap(done, node)["failed"] == 0
    assert report["flavor"] == "containerd" and report["containerd_version"].startswith("1.6.")
    assert sorted(report["files_changed"]) == ["/etc/containerd/conf.d/99-nvidia.toml", "/etc/containerd/config.toml"]
    assert report["restarted"] and report["validated"] and facts[node]["pending"] is False
    assert report["cdi_enabled"] is False, "containerd 1.6 has no CDI: the role says so instead of writing keys"

    # The user's config only gained the import line; the real containerd reads the drop-in.
    after = fleet.ssh(node, "cat /etc/containerd/config.toml").stdout
    assert after == 'imports = ["/etc/containerd/conf.d/*.toml"]\n' + before
    dump = config_dump(fleet, node)
    assert '"/etc/containerd/conf.d/99-nvidia.toml"' in dump
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]' in dump
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump
    assert 'bin_dir = "/usr/lib/cni"' in dump, "the Debian config's CNI dir survives the drop-in's CRI table"
    assert fleet.ssh(node, "systemctl is-active containerd").stdout.strip() == "active"
    assert fleet.ssh(node, "test -e /var/lib/gpuops/containerd-restart-pending", check=False).returncode != 0
    spec = fleet.ssh(node, "cat /etc/cdi/nvidia.yaml").stdout
    assert "nvidia.com/gpu" in spec and "/dev/nvidia0" in spec

    pid = fleet.ssh(node, "systemctl show -p MainPID --value containerd").stdout.strip()
    done, facts = run_role(fleet, tmp_path, node, "container_runtime", role_vars, name="second")
    assert recap(done, node)["changed"] == 0
    assert facts[node]["report"]["files_changed"] == [] and not facts[node]["report"]["restarted"]
    assert fleet.ssh(node, "systemctl show -p MainPID --value containerd").stdout.strip() == pid, \
        "an unchanged config must not restart containerd"


def test_without_permission_to_restart_the_restart_stays_pending_across_runs(fleet, tmp_path):
    node = "gpu-node-02"
    fleet.ssh(node, "rm -rf /var/lib/rancher /etc/containerd/conf.d /var/lib/gpuops")
    role_vars = {"container_runtime_toolkit_install": False, "container_runtime_cdi_spec_manage": False,
                 "container_runtime_set_as_default": True}
    config_before = fleet.ssh(node, "sha256sum /etc/containerd/config.toml").stdout
    done, facts = run_role(fleet, tmp_path, node, "container_runtime", role_vars, name="dry", check_mode=True)
    assert facts[node]["report"]["files_changed"] and recap(done, node)["changed"] >= 1
    assert fleet.ssh(node, "sha256sum /etc/containerd/config.toml").stdout == config_before, "check mode wrote"
    assert fleet.ssh(node, "ls /etc/containerd/conf.d /var/lib/gpuops", check=False).returncode != 0

    done, facts = run_role(fleet, tmp_path, node, "container_runtime", role_vars, name="pending")
    assert facts[node]["pending"] is True and not facts[node]["report"]["restarted"]
    assert fleet.ssh(node, "systemctl is-active containerd", check=False).stdout.strip() != "active"
    assert 'default_runtime_name = "nvidia"' in config_dump(fleet, node)

    done, facts = run_role(fleet, tmp_path, node, "container_runtime", role_vars, name="pending-again")
    assert recap(done, node)["changed"] == 0
    assert facts[node]["pending"] is True, "the restart the first run could not do is still owed"

    allowed = dict(role_vars, container_runtime_restart_allowed=True)
    done, facts = run_role(fleet, tmp_path, node, "container_runtime", allowed, name="pending-allowed")
    assert facts[node]["report"]["restarted"] and facts[node]["pending"] is False
    assert fleet.ssh(node, "systemctl is-active containerd").stdout.strip() == "active"
    fleet.ssh(node, "systemctl stop containerd")


def test_k3s_generated_config_is_left_alone_and_its_agent_restarted(fleet, tmp_path):
    node = "gpu-node-02"
    with open(K3S_FIXTURE) as handle:
        generated = handle.read()
    fleet.ssh(node, "mkdir -p %s /etc/systemd/system && printf '%%s' %s > %s/config.toml" % (
        K3S_DIR, _shell_quote(generated), K3S_DIR))
    fleet.ssh(node, "printf '[Service]\\nExecStart=/bin/sleep infinity\\n' > /etc/systemd/system/k3s-agent.service"
                    " && systemctl start k3s-agent")
    agent_pid = fleet.ssh(node, "systemctl show -p MainPID --value k3s-agent").stdout.strip()
    digest = hashlib.sha256(generated.encode()).hexdigest()
    # The node's containerd stands in for the one k3s embeds (validation then runs, as on a real k3s node).
    role_vars = {"container_runtime_toolkit_install": False, "container_runtime_cdi_spec_manage": False,
                 "container_runtime_restart_allowed": True, "container_runtime_containerd": "/usr/bin/containerd"}
    done, facts = run_role(fleet, tmp_path, node, "container_runtime", role_vars, name="k3s")
    report = facts[node]["report"]
    assert report["flavor"] == "k3s" and report["service"] == "k3s-agent" and report["restarted"]
    assert report["validated"]
    assert report["files_changed"] == [K3S_DIR + "/config.toml.d/99-nvidia.toml"]
    assert fleet.ssh(node, "sha256sum %s/config.toml" % K3S_DIR).stdout.split()[0] == digest
    dump = config_dump(fleet, node, K3S_DIR + "/config.toml")
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump
    assert 'bin_dir = "/var/lib/rancher/k3s/data/current/bin"' in dump
    new_pid = fleet.ssh(node, "systemctl show -p MainPID --value k3s-agent").stdout.strip()
    assert new_pid not in ("0", agent_pid), "the k3s agent is what restarts k3s's containerd"

    done, facts = run_role(fleet, tmp_path, node, "container_runtime", role_vars, name="k3s-again")
    assert recap(done, node)["changed"] == 0
    fleet.ssh(node, "systemctl stop k3s-agent; rm -rf /var/lib/rancher /etc/systemd/system/k3s-agent.service")


def _shell_quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def kube_apps(lab):
    from kubernetes import client, config
    api_client = config.new_client_from_config(config_file=os.path.join(lab.state_dir, "kubeconfig"))
    return client.AppsV1Api(api_client), client.CoreV1Api(api_client)


def test_device_plugin_daemonset_is_created_on_the_api_twin_and_time_slicing_follows(fleet, tmp_path):
    apps, core = kube_apps(fleet)
    from kubernetes.client.rest import ApiException
    try:  # a cluster without the plugin: the role must create it
        apps.delete_namespaced_daemon_set("nvidia-device-plugin-daemonset", "kube-system")
    except ApiException as exc:
        assert exc.status == 404
    role_vars = {"device_plugin_kubeconfig": os.path.join(fleet.state_dir, "kubeconfig"),
                 "device_plugin_mig_strategy": "single"}
    done, _facts = run_role(fleet, tmp_path, "localhost", "device_plugin", role_vars, name="plugin")
    daemonset = apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", "kube-system")
    container = daemonset.spec.template.spec.containers[0]
    assert container.image == "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
    assert {env.name: env.value for env in container.env} == {"FAIL_ON_INIT_ERROR": "false", "MIG_STRATEGY": "single"}
    assert daemonset.spec.template.spec.volumes[0].host_path.path == "/var/lib/kubelet/device-plugins"

    done, _facts = run_role(fleet, tmp_path, "localhost", "device_plugin", role_vars, name="plugin-again")
    assert recap(done, "localhost")["changed"] == 0

    # The twin's GPU Feature Discovery drops every nvidia.com/ node label it did not set itself (real GFD keeps
    # others, e.g. the default nvidia.com/device-plugin.config), so this test selects with a label of its own.
    sliced = dict(role_vars, device_plugin_time_slicing_enabled=True, device_plugin_time_slicing_nodes=["gpu-node-01"],
                  device_plugin_time_slicing_label_key="gpuops.test/device-plugin.config")
    run_role(fleet, tmp_path, "localhost", "device_plugin", sliced, name="sliced")
    config_map = core.read_namespaced_config_map("nvidia-device-plugin-daemonset-time-slicing", "kube-system")
    assert "replicas: 4" in config_map.data["config.yaml"]
    assert core.read_node("gpu-node-01").metadata.labels["gpuops.test/device-plugin.config"] == "time-slicing"
    sliced_daemonset = apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset-time-slicing", "kube-system")
    assert sliced_daemonset.spec.template.spec.node_selector == {"gpuops.test/device-plugin.config": "time-slicing"}

    run_role(fleet, tmp_path, "localhost", "device_plugin", role_vars, name="unsliced")
    with pytest.raises(ApiException) as gone:
        apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset-time-slicing", "kube-system")
    assert gone.value.status == 404
