# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Run the real cdi_spec main() in-process on tmp_path (nothing mocked but the arguments and PATH)."""

from __future__ import annotations

import json
import os
import stat

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import cdi as _cdi
from ansible_collections.gpuops.nvidia.plugins.modules import cdi_spec
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import isolate_warnings, patch_module_args

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "cdi")

GPU_DEVICES = [
    {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
    {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
]


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """module.warn() collects into a process-wide store; give each in-process run its own."""
    isolate_warnings(monkeypatch)


def warning_messages(result):
    """The warning texts of a result (ansible-core 2.19 returns them as WarningSummary dicts)."""
    return [item["event"]["msg"] if isinstance(item, dict) else item for item in result.get("warnings", [])]


def run_module(capsys, check_mode=False, diff=False, **args):
    """Return (exit code, result dict) of one module run."""
    if check_mode:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            cdi_spec.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def fixture_text(name, driver_root):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read().replace("{{ .driverRoot }}", driver_root)


def install_fake_nvidia_ctk(tmp_path, monkeypatch, output, rc=0):
    """Put an nvidia-ctk on PATH that records its argv and prints output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "ctk-output").write_text(output)
    script = bin_dir / "nvidia-ctk"
    script.write_text('#!/bin/sh\nprintf "%%s\\n" "$@" > "%s"\ncat "%s"\necho "INFO generating" >&2\nexit %d\n'
                      % (tmp_path / "ctk-argv", tmp_path / "ctk-output", rc))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ.get("PATH", "")))
    return tmp_path / "ctk-argv"


def make_driver_root(tmp_path, driver_version):
    """A driver root with the files the nvidia-ctk 'default' expectation points at, for one driver version."""
    root = tmp_path / "driver-root"
    for relative in ("dev/nvidia0", "dev/nvidiactl", "lib/x86_64-linux-gnu/libcuda.so.%s" % driver_version,
                     "lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.%s" % driver_version):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return str(root)


def ctk_spec_for(root, driver_version):
    """The nvidia-ctk expected output for root, as a driver of driver_version would produce it."""
    text = fixture_text("nvidia-ctk_generate_test_default_expected.yaml.tmpl", root).replace("999.88.77", driver_version)
    spec = yaml.safe_load(text)
    spec["kind"] = "nvidia.com/gpu"
    # The hook binary is not installed in the test environment; drop the hooks so only driver files matter.
    del spec["containerEdits"]["hooks"]
    return spec


# ----------------------------------------------------------------------------------------- explicit devices


def test_explicit_devices_create_the_file_with_computed_version_and_mode_0644(tmp_path, capsys):
    path = tmp_path / "etc" / "cdi" / "nvidia.yaml"
    rc, result = run_module(capsys, path=str(path), devices=GPU_DEVICES,
                            container_edits={"env": ["NVIDIA_VISIBLE_DEVICES=void"]})
    assert rc == 0 and result["changed"] is True
    assert result["cdi_version"] == "0.5.0"  # device name "0" starts with a digit
    assert result["devices"] == ["0", "all"]
    assert yaml.safe_load(path.read_text()) == result["spec"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert _cdi.validate_spec(result["spec"]) == []


def test_second_run_is_idempotent_even_when_the_file_is_formatted_differently(tmp_path, capsys):
    path = tmp_path / "nvidia.yaml"
    run_module(capsys, path=str(path), devices=GPU_DEVICES)
    spec = yaml.safe_load(path.read_text())
    path.write_text(json.dumps(spec, sort_keys=True))  # same content, other bytes
    before = path.read_text()
    rc, result = run_module(capsys, path=str(path), devices=GPU_DEVICES)
    assert rc == 0 and result["changed"] is False
    assert path.read_text() == before


def test_check_mode_reports_the_change_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "cdi" / "nvidia.yaml"
    rc, result = run_module(capsys, check_mode=True, path=str(path), devices=GPU_DEVICES)
    assert rc == 0 and result["changed"] is True
    assert not path.parent.exists()


def test_diff_mode_returns_before_and_after_text(tmp_path, capsys):
    path = tmp_path / "nvidia.json"
    run_module(capsys, path=str(path), devices=GPU_DEVICES[:1])
    before = path.read_text()
    rc, result = run_module(capsys, diff=True, check_mode=True, path=str(path), devices=GPU_DEVICES)
    assert rc == 0 and result["changed"] is True
    assert result["diff"]["before"] == before
    assert json.loads(result["diff"]["after"])["devices"][1]["name"] == "all"
    assert path.read_text() == before  # check mode


def test_json_path_is_written_as_json(tmp_path, capsys):
    path = tmp_path / "nvidia.json"
    run_module(capsys, path=str(path), devices=GPU_DEVICES)
    assert json.loads(path.read_text())["kind"] == "nvidia.com/gpu"


def test_yaml_file_is_written_as_json_text_when_pyyaml_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_cdi, "HAS_YAML", False)
    path = tmp_path / "nvidia.yaml"
    rc, result = run_module(capsys, path=str(path), devices=GPU_DEVICES)
    assert rc == 0
    assert json.loads(path.read_text()) == result["spec"]
    rc, result = run_module(capsys, path=str(path), devices=GPU_DEVICES)
    assert result["changed"] is False


def test_reading_a_yaml_spec_without_pyyaml_fails_clearly(tmp_path, capsys, monkeypatch):
    path = tmp_path / "nvidia.yaml"
    path.write_text(fixture_text("docker-docs_g4dn-xlarge_T4_570.133.20_nvidia.yaml", ""))
    monkeypatch.setattr(_cdi, "HAS_YAML", False)
    rc, result = run_module(capsys, path=str(path), devices=GPU_DEVICES)
    assert rc == 1
    assert "needs PyYAML" in result["msg"]


# ----------------------------------------------------------------------------------------- bad input


def test_bad_input_fails_before_anything_is_written(tmp_path, capsys):
    path = tmp_path / "new-dir" / "nvidia.yaml"
    devices = GPU_DEVICES + [{"name": "bad", "containerEdits": {"env": ["FOO"]}}]
    rc, result = run_module(capsys, path=str(path), devices=devices)
    assert rc == 1
    assert result["msg"] == 'invalid CDI spec, nothing written: devices[2].containerEdits.env[0]: "FOO" must be KEY=VALUE'
    assert result["errors"] == ['devices[2].containerEdits.env[0]: "FOO" must be KEY=VALUE']
    assert not path.parent.exists()


def test_invalid_spec_leaves_an_existing_file_untouched(tmp_path, capsys):
    path = tmp_path / "nvidia.yaml"
    run_module(capsys, path=str(path), devices=GPU_DEVICES)
    before = path.read_text()
    rc, result = run_module(capsys, path=str(path), devices=[{"name": "0", "containerEdits": {"hooks": [
        {"hookName": "preStart", "path": "/bin/true"}]}}])
    assert rc == 1 and "hooks[0].hookName" in result["msg"]
    assert path.read_text() == before
    assert os.listdir(str(tmp_path)) == ["nvidia.yaml"]


def test_pinned_version_lower_than_needed_fails(tmp_path, capsys):
    rc, result = run_module(capsys, path=str(tmp_path / "nvidia.yaml"), devices=GPU_DEVICES, cdi_version="0.4.0")
    assert rc == 1
    assert result["msg"].startswith("cdi_version: 0.4.0 is lower than 0.5.0, which the spec needs (devices[0].name")


def test_yml_extension_is_refused_because_cdi_ignores_it(tmp_path, capsys):
    rc, result = run_module(capsys, path=str(tmp_path / "nvidia.yml"), devices=GPU_DEVICES)
    assert rc == 1 and "a .yml file is silently ignored" in result["msg"]


def test_bad_kind_is_refused(tmp_path, capsys):
    rc, result = run_module(capsys, path=str(tmp_path / "x.yaml"), devices=GPU_DEVICES, kind="nvidia.com")
    assert rc == 1 and result["msg"] == "kind: kind 'nvidia.com' must have the form vendor.com/class"


def test_failed_rename_leaves_no_temp_file_and_the_old_spec_intact(tmp_path, capsys, monkeypatch):
    path = tmp_path / "nvidia.yaml"
    run_module(capsys, path=str(path), devices=GPU_DEVICES[:1])
    before = path.read_text()

    def broken_replace(src, dst):
        assert os.path.basename(src).startswith(".nvidia.yaml.") and src.endswith(".tmp")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cdi_spec.os, "replace", broken_replace)
    rc, result = run_module(capsys, path=str(path), devices=GPU_DEVICES)
    assert rc == 1 and "No space left on device" in result["msg"]
    assert path.read_text() == before
    assert os.listdir(str(tmp_path)) == ["nvidia.yaml"]


# ----------------------------------------------------------------------------------------- absent


def test_absent_removes_the_file_and_honours_check_and_diff_mode(tmp_path, capsys):
    path = tmp_path / "nvidia.yaml"
    run_module(capsys, path=str(path), devices=GPU_DEVICES)
    text = path.read_text()
    rc, result = run_module(capsys, check_mode=True, diff=True, path=str(path), state="absent")
    assert rc == 0 and result["changed"] is True and path.exists()
    assert result["diff"] == {"before": text, "after": "", "before_header": str(path), "after_header": str(path)}
    rc, result = run_module(capsys, path=str(path), state="absent")
    assert result["changed"] is True and not path.exists()
    rc, result = run_module(capsys, path=str(path), state="absent")
    assert rc == 0 and result["changed"] is False


# ----------------------------------------------------------------------------------------- generators


def test_stale_spec_after_a_driver_upgrade_is_regenerated_by_nvidia_ctk(tmp_path, capsys, monkeypatch):
    root = make_driver_root(tmp_path, "999.88.77")  # the new driver's files are installed
    path = tmp_path / "cdi" / "nvidia.yaml"
    path.parent.mkdir()
    # On disk: the spec written for the old driver, whose libraries the upgrade removed.
    path.write_text(yaml.safe_dump(ctk_spec_for(root, "535.86.05")))
    argv_file = install_fake_nvidia_ctk(tmp_path, monkeypatch, yaml.safe_dump(ctk_spec_for(root, "999.88.77")))

    rc, result = run_module(capsys, path=str(path), generator="nvidia-ctk")
    assert rc == 0, result
    assert result["stale"] is True and result["changed"] is True
    assert result["missing_paths"] == [root + "/lib/x86_64-linux-gnu/libcuda.so.535.86.05",
                                       root + "/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.535.86.05"]
    assert argv_file.read_text().split("\n")[:4] == ["cdi", "generate", "--format", "json"]
    assert "libcuda.so.999.88.77" in path.read_text()
    assert result["cdi_version"] == "0.5.0"  # nvidia-ctk's own choice is kept

    rc, result = run_module(capsys, path=str(path), generator="nvidia-ctk")
    assert result["stale"] is False and result["changed"] is False and result["missing_paths"] == []


def test_nvidia_ctk_is_asked_for_the_vendor_and_class_of_a_custom_kind(tmp_path, capsys, monkeypatch):
    root = make_driver_root(tmp_path, "999.88.77")
    spec = ctk_spec_for(root, "999.88.77")
    spec["kind"] = "example.com/device"
    argv_file = install_fake_nvidia_ctk(tmp_path, monkeypatch, json.dumps(spec))
    rc, result = run_module(capsys, path=str(tmp_path / "example.json"), generator="nvidia-ctk",
                            kind="example.com/device", nvidia_ctk_args=["--driver-root=" + root])
    assert rc == 0, result
    assert argv_file.read_text().split("\n")[4:9] == ["--vendor", "example.com", "--class", "device",
                                                      "--driver-root=" + root]


def test_nvidia_ctk_output_of_another_kind_fails(tmp_path, capsys, monkeypatch):
    root = make_driver_root(tmp_path, "999.88.77")
    spec = ctk_spec_for(root, "999.88.77")
    spec["kind"] = "example.com/device"
    install_fake_nvidia_ctk(tmp_path, monkeypatch, json.dumps(spec))
    rc, result = run_module(capsys, path=str(tmp_path / "nvidia.yaml"), generator="nvidia-ctk")
    assert rc == 1 and result["msg"] == "nvidia-ctk cdi generate produced kind 'example.com/device', expected 'nvidia.com/gpu'"
    assert not (tmp_path / "nvidia.yaml").exists()


def test_nvidia_ctk_failure_is_reported_with_its_stderr(tmp_path, capsys, monkeypatch):
    install_fake_nvidia_ctk(tmp_path, monkeypatch, "", rc=1)
    rc, result = run_module(capsys, path=str(tmp_path / "nvidia.yaml"), generator="nvidia-ctk")
    assert rc == 1 and result["msg"] == "nvidia-ctk cdi generate failed (rc 1): INFO generating"


def test_missing_nvidia_ctk_fails_with_a_hint(tmp_path, capsys):
    rc, result = run_module(capsys, path=str(tmp_path / "nvidia.yaml"), generator="nvidia-ctk",
                            nvidia_ctk=str(tmp_path / "no-such-nvidia-ctk"))
    assert rc == 1 and "install nvidia-container-toolkit" in result["msg"]


def test_facts_generator_writes_index_uuid_and_all_devices(tmp_path, capsys):
    facts = {"gpus": [{"index": 0, "uuid": "GPU-6cf00fa7-59ac-16f2-3e83-d24ccdc56f84", "mig_devices": []}],
             "device_nodes": [{"path": "/dev/nvidia0", "major": 195, "minor": 0},
                              {"path": "/dev/nvidiactl", "major": 195, "minor": 255}]}
    path = tmp_path / "nvidia.yaml"
    rc, result = run_module(capsys, path=str(path), generator="facts", facts=facts,
                            container_edits={"env": ["EXTRA=1"]})
    assert rc == 0, result
    assert result["devices"] == ["0", "GPU-6cf00fa7-59ac-16f2-3e83-d24ccdc56f84", "all"]
    assert result["spec"]["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=void", "EXTRA=1"],
                                                "deviceNodes": [{"path": "/dev/nvidiactl"}]}
    assert yaml.safe_load(path.read_text()) == result["spec"]


def test_facts_generator_without_device_nodes_fails(tmp_path, capsys):
    rc, result = run_module(capsys, path=str(tmp_path / "nvidia.yaml"), generator="facts",
                            facts={"gpus": [{"index": 0, "uuid": "GPU-x"}], "device_nodes": []})
    assert rc == 1 and "needs /dev/nvidia0" in result["msg"]


def test_present_needs_devices_or_a_generator(tmp_path, capsys):
    rc, result = run_module(capsys, path=str(tmp_path / "nvidia.yaml"))
    assert rc == 1 and "devices, generator" in result["msg"]
    assert not (tmp_path / "nvidia.yaml").exists()


def test_container_edits_are_refused_with_the_nvidia_ctk_generator(tmp_path, capsys):
    rc, result = run_module(capsys, path=str(tmp_path / "nvidia.yaml"), generator="nvidia-ctk",
                            container_edits={"env": ["A=1"]})
    assert rc == 1 and result["msg"] == "container_edits cannot be combined with generator=nvidia-ctk (it writes the whole spec)"


def test_generator_and_devices_are_mutually_exclusive(tmp_path, capsys):
    rc, result = run_module(capsys, path=str(tmp_path / "nvidia.yaml"), generator="facts", facts={},
                            devices=GPU_DEVICES)
    assert rc == 1 and "mutually exclusive" in result["msg"]


# ----------------------------------------------------------------------------------------- neighbours


def test_duplicate_device_names_in_the_same_directory_are_warned_about(tmp_path, capsys):
    (tmp_path / "old-nvidia.json").write_text(json.dumps(
        {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": GPU_DEVICES}))
    (tmp_path / "other-kind.json").write_text(json.dumps(
        {"cdiVersion": "0.5.0", "kind": "vendor.com/device", "devices": GPU_DEVICES}))
    (tmp_path / "ignored.yml").write_text(json.dumps(
        {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": GPU_DEVICES}))
    rc, result = run_module(capsys, path=str(tmp_path / "nvidia.yaml"), devices=GPU_DEVICES)
    assert rc == 0
    duplicate_warnings = [warning for warning in warning_messages(result) if "also defines" in warning]
    assert duplicate_warnings == [
        "%s also defines nvidia.com/gpu devices 0, all; CDI refuses a device that two spec files of one directory "
        "define, so requests for it will fail" % (tmp_path / "old-nvidia.json")]


def test_spec_pointing_at_missing_host_files_is_warned_about(tmp_path, capsys):
    devices = [{"name": "0", "containerEdits": {"mounts": [
        {"hostPath": str(tmp_path / "libcuda.so.1"), "containerPath": "/usr/lib/libcuda.so.1"}]}}]
    rc, result = run_module(capsys, path=str(tmp_path / "nvidia.yaml"), devices=devices)
    assert rc == 0
    assert warning_messages(result) == ["the spec points at host files that do not exist: %s" % (tmp_path / "libcuda.so.1")]


# ----------------------------------------------------------------------------------------- refreshed, auto

FACTS = {"gpus": [{"index": 0, "uuid": "GPU-6cf00fa7-59ac-16f2-3e83-d24ccdc56f84", "mig_devices": []}],
         "device_nodes": [{"path": "/dev/nvidia0", "major": 195, "minor": 0}]}


def test_refreshed_leaves_a_node_without_a_spec_without_one(tmp_path, capsys):
    path = tmp_path / "cdi" / "nvidia.yaml"
    rc, result = run_module(capsys, path=str(path), state="refreshed", generator="auto", facts=FACTS,
                            nvidia_ctk=str(tmp_path / "no-such-nvidia-ctk"))
    assert rc == 0, result
    assert (result["changed"], result["spec"], result["devices"]) == (False, None, [])
    assert not path.parent.exists()


def test_refreshed_with_auto_regenerates_a_stale_spec_with_nvidia_ctk_when_installed(tmp_path, capsys, monkeypatch):
    root = make_driver_root(tmp_path, "999.88.77")
    path = tmp_path / "nvidia.yaml"
    path.write_text(yaml.safe_dump(ctk_spec_for(root, "535.86.05")))
    install_fake_nvidia_ctk(tmp_path, monkeypatch, yaml.safe_dump(ctk_spec_for(root, "999.88.77")))
    rc, result = run_module(capsys, path=str(path), state="refreshed", generator="auto", facts=FACTS)
    assert rc == 0, result
    assert (result["generator"], result["stale"], result["changed"]) == ("nvidia-ctk", True, True)
    assert "libcuda.so.999.88.77" in path.read_text()


def test_auto_without_nvidia_ctk_builds_from_the_facts_and_needs_them(tmp_path, capsys):
    path = tmp_path / "nvidia.yaml"
    path.write_text(yaml.safe_dump({"cdiVersion": "0.3.0", "kind": "nvidia.com/gpu", "devices": GPU_DEVICES}))
    missing_ctk = str(tmp_path / "no-such-nvidia-ctk")
    rc, result = run_module(capsys, path=str(path), state="refreshed", generator="auto", facts=FACTS,
                            nvidia_ctk=missing_ctk)
    assert rc == 0, result
    assert result["generator"] == "facts"
    assert result["devices"] == ["0", "GPU-6cf00fa7-59ac-16f2-3e83-d24ccdc56f84", "all"]
    before = path.read_text()
    rc, result = run_module(capsys, path=str(path), state="refreshed", generator="auto", nvidia_ctk=missing_ctk)
    assert rc == 1 and result["msg"] == "generator=auto: %s not found and no facts given to build the spec from" % missing_ctk
    assert path.read_text() == before


def test_refreshed_needs_a_generator(tmp_path, capsys):
    rc, result = run_module(capsys, path=str(tmp_path / "nvidia.yaml"), state="refreshed", devices=GPU_DEVICES)
    assert rc == 1 and "state is refreshed but all of the following are missing: generator" in result["msg"]
