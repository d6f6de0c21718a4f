# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Run the real module main() in-process on tmp_path, validated by this machine's real containerd."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.host import toml as _toml
from ansible_collections.gpuops.nvidia.plugins.modules import containerd_nvidia_runtime
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import isolate_warnings, patch_module_args

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "containerd")
CONTAINERD = shutil.which("containerd")
needs_containerd = pytest.mark.skipif(CONTAINERD is None, reason="needs the containerd binary")


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    isolate_warnings(monkeypatch)


def run_module(capsys, check_mode=False, diff=False, **args):
    if check_mode:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            containerd_nvidia_runtime.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def paths(tmp_path):
    config = tmp_path / "etc" / "config.toml"
    config.parent.mkdir()
    with open(os.path.join(FIXTURES, "debian12_containerd-1.6.20_etc_config.toml")) as handle:
        config.write_text(handle.read())
    return {"config_path": str(config), "drop_in_path": str(tmp_path / "etc" / "conf.d" / "99-nvidia.toml"),
            "restart_marker": str(tmp_path / "state" / "restart-pending"), "flavor": "containerd"}


@needs_containerd
def test_first_run_writes_drop_in_and_import_then_second_run_changes_nothing(capsys, paths):
    original = open(paths["config_path"]).read()
    rc, result = run_module(capsys, diff=True, **paths)
    assert rc == 0, result
    assert result["changed"] and result["validated"] and result["restart_pending"]
    assert result["files_changed"] == sorted([paths["drop_in_path"], paths["config_path"]])
    assert result["config_version"] == 2 and result["cri_plugin"] == "io.containerd.grpc.v1.cri"
    main_text = open(paths["config_path"]).read()
    assert main_text == 'imports = ["%s/*.toml"]\n' % os.path.dirname(paths["drop_in_path"]) + original
    drop_in = _toml.loads(open(paths["drop_in_path"]).read())
    runtime = drop_in["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]
    assert runtime["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert oct(os.stat(paths["drop_in_path"]).st_mode & 0o777) == "0o644"
    assert os.path.exists(paths["restart_marker"])
    assert {item["after_header"] for item in result["diff"]} == set(result["files_changed"])

    rc, again = run_module(capsys, **paths)
    assert rc == 0 and not again["changed"] and again["validated"]
    assert again["restart_pending"], "the marker keeps the pending restart until the caller restarts containerd"
    os.unlink(paths["restart_marker"])
    rc, third = run_module(capsys, **paths)
    assert not third["changed"] and not third["restart_pending"]


@needs_containerd
def test_containerd_16_gets_no_cdi_keys_and_a_warning(capsys, paths):
    rc, result = run_module(capsys, enable_cdi=True, cdi_spec_dirs=["/etc/cdi"], **paths)
    assert rc == 0
    assert result["containerd_version"].startswith("1.6.") and result["cdi_enabled"] is False
    assert any("no CDI support" in str(warning) for warning in result["warnings"])
    assert "enable_cdi" not in open(paths["drop_in_path"]).read()


@needs_containerd
def test_check_mode_reports_the_change_and_writes_nothing(capsys, paths):
    original = open(paths["config_path"]).read()
    rc, result = run_module(capsys, check_mode=True, diff=True, **paths)
    assert rc == 0 and result["changed"] and result["restart_pending"]
    assert open(paths["config_path"]).read() == original
    assert not os.path.exists(paths["drop_in_path"]) and not os.path.exists(paths["restart_marker"])
    assert "nvidia-container-runtime" in [item for item in result["diff"]
                                          if item["after_header"] == paths["drop_in_path"]][0]["after"]


@needs_containerd
def test_set_as_default_and_three_runtimes_are_shown_by_the_real_dump(capsys, paths):
    runtimes = [{"name": "nvidia", "binary": "/usr/bin/nvidia-container-runtime"},
                {"name": "nvidia-cdi", "binary": "/usr/bin/nvidia-container-runtime.cdi"}]
    rc, result = run_module(capsys, set_as_default=True, runtimes=runtimes, **paths)
    assert rc == 0 and result["validated"]
    dump = _toml.loads(os.popen("%s --config %s config dump" % (CONTAINERD, paths["config_path"])).read())
    cri = dump["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni", "the user's CRI settings survive the drop-in's table"


@needs_containerd
def test_missing_main_config_becomes_imports_and_version(capsys, paths):
    os.unlink(paths["config_path"])
    rc, result = run_module(capsys, **paths)
    assert rc == 0 and result["validated"]
    assert open(paths["config_path"]).read() == 'imports = ["%s/*.toml"]\nversion = 2\n' % os.path.dirname(
        paths["drop_in_path"])


@needs_containerd
def test_broken_main_config_fails_before_anything_changes(capsys, paths):
    with open(paths["config_path"], "w") as handle:
        handle.write("version = 2\n[plugins\n")
    rc, result = run_module(capsys, **paths)
    assert rc == 1 and "config dump" in result["msg"] and "nothing changed" in result["msg"]
    assert not os.path.exists(paths["drop_in_path"])


@needs_containerd
def test_version_1_config_is_refused_unchanged(capsys, paths):
    shutil.copy(os.path.join(FIXTURES, "nvidia-ctk-tests_input_config_v1.toml"), paths["config_path"])
    before = open(paths["config_path"]).read()
    rc, result = run_module(capsys, **paths)
    assert rc == 1 and "version 1 config" in result["msg"]
    assert open(paths["config_path"]).read() == before and not os.path.exists(paths["drop_in_path"])


def test_a_dump_that_does_not_show_the_runtime_restores_the_previous_files(capsys, paths, tmp_path):
    # A containerd that accepts any config but shows none of it: the module must roll back.
    fake = tmp_path / "containerd"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'containerd github.com/containerd/containerd v1.7.27 x'"
                    " && exit 0\necho 'version = 2'\n")
    fake.chmod(0o755)
    before = open(paths["config_path"]).read()
    rc, result = run_module(capsys, containerd=str(fake), **paths)
    assert rc == 1 and "previous files were restored" in result["msg"]
    assert open(paths["config_path"]).read() == before
    assert not os.path.exists(paths["drop_in_path"]) and not os.path.exists(paths["restart_marker"])


def test_duplicate_runtime_names_are_refused(capsys, paths):
    rc, result = run_module(capsys, runtimes=[{"name": "nvidia", "binary": "/a"}, {"name": "nvidia", "binary": "/b"}],
                            **paths)
    assert rc == 1 and "duplicate" in result["msg"]


def test_drop_in_beside_the_main_config_is_refused(capsys, paths):
    paths["drop_in_path"] = os.path.join(os.path.dirname(paths["config_path"]), "99-nvidia.toml")
    rc, result = run_module(capsys, containerd="/bin/true", **paths)
    assert rc == 1 and "own directory" in result["msg"]


def k3s_node(tmp_path, fixture_name):
    """A k3s data dir and config dir under tmp_path with the generated containerd config of fixture_name."""
    data_dir, config_dir = tmp_path / "var-lib-rancher-k3s", tmp_path / "etc-rancher-k3s"
    generated = data_dir / "agent" / "etc" / "containerd" / "config.toml"
    generated.parent.mkdir(parents=True)
    with open(os.path.join(FIXTURES, fixture_name)) as handle:
        generated.write_text(handle.read().replace("/var/lib/rancher/k3s", str(data_dir)))
    return {"flavor": "k3s", "rancher_data_dir": str(data_dir), "rancher_config_dir": str(config_dir),
            "restart_marker": str(tmp_path / "state" / "restart-pending")}, generated


@needs_containerd
def test_k3s_that_imports_config_toml_d_gets_the_drop_in_there_and_its_config_stays(capsys, tmp_path):
    args, generated = k3s_node(tmp_path, "k3s-imports_generated_config_CONSTRUCTED.toml")
    before = generated.read_text()
    # k3s's embedded containerd is where k3s unpacks it; this machine's real containerd stands in for it.
    embedded = os.path.join(args["rancher_data_dir"], "data", "current", "bin", "containerd")
    os.makedirs(os.path.dirname(embedded))
    os.symlink(CONTAINERD, embedded)
    rc, result = run_module(capsys, **args)
    assert rc == 0, result
    drop_in = str(generated.parent / "config.toml.d" / "99-nvidia.toml")
    assert result["drop_in_path"] == drop_in and result["files_changed"] == [drop_in]
    assert result["validated"] and result["service"] == "k3s-agent"
    assert generated.read_text() == before
    cri = _toml.loads(open(drop_in).read())["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["cni"]["bin_dir"] == args["rancher_data_dir"] + "/data/current/bin"
    assert cri["containerd"]["runtimes"]["nvidia"]["options"] == {
        "SystemdCgroup": False, "BinaryName": "/usr/bin/nvidia-container-runtime"}
    rc, again = run_module(capsys, **args)
    assert not again["changed"]


def test_k3s_without_its_embedded_containerd_is_not_validated_by_the_distributions_one(capsys, tmp_path):
    args, _generated = k3s_node(tmp_path, "k3s-imports_generated_config_CONSTRUCTED.toml")
    rc, result = run_module(capsys, **args)
    assert rc == 0 and result["changed"] and not result["validated"] and result["containerd_version"] is None


def test_k3s_without_imports_sets_default_runtime_through_config_yaml_d_only(capsys, tmp_path):
    args, generated = k3s_node(tmp_path, "k3s-v1.27_generated_config_CONSTRUCTED.toml")
    before = generated.read_text()
    rc, result = run_module(capsys, set_as_default=True, containerd="/nonexistent/containerd", **args)
    assert rc == 0, result
    flags = os.path.join(args["rancher_config_dir"], "config.yaml.d", "99-gpuops-nvidia.yaml")
    assert result["flags_path"] == flags and result["drop_in_path"] is None and result["files_changed"] == [flags]
    assert "default-runtime: nvidia\n" in open(flags).read()
    assert generated.read_text() == before and not result["validated"]
    # Asking no longer for the default removes the file this module wrote.
    rc, result = run_module(capsys, set_as_default=False, containerd="/nonexistent/containerd", **args)
    assert result["changed"] and not os.path.exists(flags)


def test_auto_flavor_with_a_data_dir_is_refused(capsys, tmp_path):
    args, _generated = k3s_node(tmp_path, "k3s-v1.27_generated_config_CONSTRUCTED.toml")
    args["flavor"] = "auto"
    rc, result = run_module(capsys, check_mode=True, **args)
    assert rc == 1 and "needs flavor k3s or rke2" in result["msg"]


@needs_containerd
@pytest.mark.parametrize("main_config", ["debian", "missing"])
def test_the_real_containerd_loads_its_cri_plugin_with_the_drop_in(capsys, paths, tmp_path, main_config):
    """containerd 1.6/1.7 replace their built-in runtimes with the drop-in's: the drop-in must repeat runc, or the
    CRI plugin does not load (recorded: containerd-1.6.20_debian12_nvidia-only-drop-in_cri-load-error.log)."""
    if main_config == "missing":
        os.unlink(paths["config_path"])
    rc, result = run_module(capsys, **paths)
    assert rc == 0 and result["validated"], result
    runtimes = _toml.loads(open(paths["drop_in_path"]).read())["plugins"]["io.containerd.grpc.v1.cri"][
        "containerd"]["runtimes"]
    assert set(runtimes) == {"runc", "nvidia"}
    if os.geteuid() != 0:
        return
    log_path = tmp_path / "containerd.log"
    with open(log_path, "w") as log:
        daemon = subprocess.Popen([CONTAINERD, "--config", paths["config_path"], "--root", str(tmp_path / "root"),
                                   "--state", str(tmp_path / "run"), "--address", str(tmp_path / "c.sock")],
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "containerd successfully booted" not in log_path.read_text():
            time.sleep(0.2)
    finally:
        daemon.terminate()
        daemon.wait(10)
    text = log_path.read_text()
    assert "containerd successfully booted" in text
    assert "failed to load plugin io.containerd.grpc.v1.cri" not in text
