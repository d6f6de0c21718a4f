# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import copy
import json
import os

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import cdi as _cdi
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import cdi_schema as _cdi_schema
from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.jsonschema import Validator, format_path

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "cdi")
SCHEMA_DIR = os.path.join(FIXTURES, "schema")

DOCKER_T4 = "docker-docs_g4dn-xlarge_T4_570.133.20_nvidia.yaml"
BLOG_T4_PARTIAL = "blog_T4_rocky9_ctk1.20_driver615_var-run-cdi_nvidia.PARTIAL.yaml"
DRA_MIG = "k8s-dra-driver_2022_mig_nvidia.yaml"
CTK_DEFAULT = "nvidia-ctk_generate_test_default_expected.yaml.tmpl"
CTK_CHMOD = "nvidia-ctk_generate_test_enableChmodHook_expected.yaml.tmpl"
ALL_SPEC_FIXTURES = (DOCKER_T4, BLOG_T4_PARTIAL, DRA_MIG, CTK_DEFAULT, CTK_CHMOD)


def load_fixture(name, driver_root="/driver-root"):
    with open(os.path.join(FIXTURES, name)) as handle:
        # The nvidia-ctk test expectations carry a Go template placeholder for the driver root.
        return yaml.safe_load(handle.read().replace("{{ .driverRoot }}", driver_root))


def load_schema_file(name):
    with open(os.path.join(SCHEMA_DIR, name)) as handle:
        return json.load(handle)


def minimal_spec(**edits):
    device_edits = edits or {"deviceNodes": [{"path": "/dev/card1"}]}
    return {"cdiVersion": "1.1.0", "kind": "vendor.com/device",
            "devices": [{"name": "card1", "containerEdits": device_edits}]}


# ----------------------------------------------------------------------------------------- fixtures


def test_shipped_schema_data_equals_the_upstream_schema_files():
    assert _cdi_schema.SCHEMA == load_schema_file("HEAD_schema_schema.json")
    assert _cdi_schema.DEFS == load_schema_file("HEAD_schema_defs.json")


@pytest.mark.parametrize("name", ALL_SPEC_FIXTURES)
def test_every_real_world_spec_fixture_is_valid(name):
    assert _cdi.validate_spec(load_fixture(name)) == []


def test_partial_blog_spec_validates_because_the_elisions_are_yaml_comments():
    # The author cut hooks and mounts with "# ..." lines, which YAML drops: what is left is a complete,
    # valid spec, just shorter than the original (2 mounts, 3 spec-level hooks).
    spec = load_fixture(BLOG_T4_PARTIAL)
    assert _cdi.validate_spec(spec) == []
    assert len(spec["containerEdits"]["mounts"]) == 2
    assert len(spec["containerEdits"]["hooks"]) == 3
    assert _cdi.device_names(spec) == ["0", "GPU-8f1f4d06-07fd-27a7-52d5-e58aa060d256", "all"]


@pytest.mark.parametrize("name, declared, needed, first_reason_path", [
    (BLOG_T4_PARTIAL, "0.7.0", "0.7.0", "devices[0].containerEdits.additionalGids"),
    (DOCKER_T4, "0.6.0", "0.5.0", "devices[0].name"),
    (DRA_MIG, "0.4.0", "0.3.0", None),
    (CTK_DEFAULT, "0.5.0", "0.5.0", "devices[0].name"),
    (CTK_CHMOD, "0.5.0", "0.5.0", "devices[0].containerEdits.deviceNodes[0].hostPath"),
])
def test_minimum_version_of_each_fixture(name, declared, needed, first_reason_path):
    spec = load_fixture(name)
    version, reasons = _cdi.minimum_version(spec)
    assert spec["cdiVersion"] == declared
    assert version == needed
    assert (reasons[0][0] if reasons else None) == first_reason_path


def test_schema_good_testdata_is_valid_and_bad_testdata_is_not():
    assert _cdi.validate_spec(load_schema_file("HEAD_schema_testdata_good_minimal.json")) == []
    assert _cdi.validate_spec(load_schema_file("HEAD_schema_testdata_good_spec-example.json")) == []
    errors = _cdi.validate_spec(load_schema_file("HEAD_schema_testdata_bad_explicit-empty.json"))
    assert errors == ["(root): required field 'cdiVersion' is missing", "(root): required field 'kind' is missing",
                      "(root): required field 'devices' is missing"]


def test_empty_schema_testdata_file_is_not_a_spec():
    with open(os.path.join(SCHEMA_DIR, "HEAD_schema_testdata_bad_empty.json")) as handle:
        text = handle.read()
    with pytest.raises(_cdi.CDIError, match="not valid JSON"):
        _cdi.parse(text, "json")
    # As YAML an empty document is null, which is no spec either.
    assert _cdi.validate_spec(_cdi.parse(text, "yaml")) == ["(root): a CDI spec must be a mapping, got NoneType"]


def test_invalid_json_error_says_where_the_text_breaks():
    with pytest.raises(_cdi.CDIError, match=r"^not valid JSON: Expecting value: line 2 column 10"):
        _cdi.parse('{"cdiVersion": "0.5.0",\n "kind": }', "json")


# ----------------------------------------------------------------------------------------- schema cross-check


def _set_path(spec, path, value):
    node = spec
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _delete_path(spec, path):
    node = spec
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]


def _mutations():
    """(id, path, new value or DELETE) applied to the docker-docs T4 spec."""
    delete = object()
    cases = [
        ("cdiVersion-int", ["cdiVersion"], 6),
        ("cdiVersion-missing", ["cdiVersion"], delete),
        ("kind-missing", ["kind"], delete),
        ("kind-list", ["kind"], ["nvidia.com/gpu"]),
        ("devices-missing", ["devices"], delete),
        ("devices-object", ["devices"], {"name": "0"}),
        ("device-string", ["devices", 0], "gpu0"),
        ("device-name-missing", ["devices", 0, "name"], delete),
        ("device-name-int", ["devices", 0, "name"], 0),
        ("device-edits-missing", ["devices", 1, "containerEdits"], delete),
        ("device-edits-list", ["devices", 1, "containerEdits"], []),
        ("annotations-int-value", ["annotations"], {"a.example.com/x": 1}),
        ("annotations-list", ["annotations"], ["x"]),
        ("device-annotations-bool", ["devices", 0, "annotations"], {"k": True}),
        ("spec-edits-list", ["containerEdits"], ["env"]),
        ("env-string", ["containerEdits", "env"], "A=B"),
        ("env-item-int-unconstrained", ["containerEdits", "env", 0], 5),
        ("deviceNodes-object", ["containerEdits", "deviceNodes"], {"path": "/dev/nvidiactl"}),
        ("deviceNode-string", ["containerEdits", "deviceNodes", 0], "/dev/nvidiactl"),
        ("deviceNode-path-missing", ["containerEdits", "deviceNodes", 0, "path"], delete),
        ("deviceNode-major-string", ["devices", 0, "containerEdits", "deviceNodes", 0, "major"], "195"),
        ("deviceNode-minor-float", ["devices", 0, "containerEdits", "deviceNodes", 0, "minor"], 0.5),
        ("deviceNode-minor-float-integral", ["devices", 0, "containerEdits", "deviceNodes", 0, "minor"], 3.0),
        ("deviceNode-uid-negative", ["containerEdits", "deviceNodes", 1, "uid"], -1),
        ("deviceNode-gid-too-big", ["containerEdits", "deviceNodes", 1, "gid"], 2 ** 32),
        ("deviceNode-gid-bool", ["containerEdits", "deviceNodes", 1, "gid"], True),
        ("deviceNode-major-int64-max", ["containerEdits", "deviceNodes", 1, "major"], 2 ** 63 - 1),
        ("deviceNode-major-int64-overflow", ["containerEdits", "deviceNodes", 1, "major"], 2 ** 63),
        ("hook-path-missing", ["containerEdits", "hooks", 0, "path"], delete),
        ("hook-name-missing", ["containerEdits", "hooks", 0, "hookName"], delete),
        ("hook-args-string", ["containerEdits", "hooks", 0, "args"], "nvidia-cdi-hook"),
        ("hook-timeout-negative", ["containerEdits", "hooks", 0, "timeout"], -5),
        ("hook-env-item-int", ["containerEdits", "hooks", 0, "env"], [1]),
        ("mount-containerPath-missing", ["containerEdits", "mounts", 0, "containerPath"], delete),
        ("mount-hostPath-int", ["containerEdits", "mounts", 0, "hostPath"], 1),
        ("mount-options-item-int", ["containerEdits", "mounts", 0, "options", 0], 1),
        ("mount-type-list", ["containerEdits", "mounts", 0, "type"], ["bind"]),
        ("intelRdt-list", ["containerEdits", "intelRdt"], ["x"]),
        ("intelRdt-enableMonitoring-string", ["containerEdits", "intelRdt"], {"enableMonitoring": "yes"}),
        ("intelRdt-schemata-string", ["containerEdits", "intelRdt"], {"schemata": "L3:0=ff"}),
        ("additionalGids-negative", ["containerEdits", "additionalGids"], [-1]),
        ("additionalGids-string", ["containerEdits", "additionalGids"], ["39"]),
        ("netDevices-name-missing", ["containerEdits", "netDevices"], [{"hostInterfaceName": "eth1"}]),
        ("netDevices-int-name", ["containerEdits", "netDevices"], [{"hostInterfaceName": "eth1", "name": 3}]),
        ("unknown-top-level-field-schema-allows", ["unknown"], "x"),
    ]
    return delete, cases


def _jsonschema_validator():
    jsonschema = pytest.importorskip("jsonschema")
    referencing = pytest.importorskip("referencing")
    from referencing.jsonschema import DRAFT7

    defs = referencing.Resource(contents=load_schema_file("HEAD_schema_defs.json"), specification=DRAFT7)
    registry = referencing.Registry().with_resources([("defs.json", defs)])
    return jsonschema.Draft7Validator(load_schema_file("HEAD_schema_schema.json"), registry=registry)


def _cross_check_instances():
    instances = [("fixture-" + name, load_fixture(name)) for name in ALL_SPEC_FIXTURES]
    for name in ("good_minimal", "good_spec-example", "bad_explicit-empty"):
        instances.append(("testdata-" + name, load_schema_file("HEAD_schema_testdata_%s.json" % name)))
    delete, cases = _mutations()
    base = load_fixture(DOCKER_T4)
    for case_id, path, value in cases:
        mutated = copy.deepcopy(base)
        if value is delete:
            _delete_path(mutated, path)
        else:
            _set_path(mutated, path, value)
        instances.append(("mutation-" + case_id, mutated))
    return instances


def test_cross_check_covers_at_least_thirty_mutations():
    assert len(_mutations()[1]) >= 30


@pytest.mark.parametrize("case_id, instance", _cross_check_instances(), ids=lambda value: value if isinstance(value, str) else "")
def test_own_schema_validator_agrees_with_jsonschema_draft7(case_id, instance):
    reference = _jsonschema_validator()
    expected = sorted(format_path(list(error.absolute_path)) for error in reference.iter_errors(instance))
    ours = Validator(_cdi_schema.RESOURCES, _cdi_schema.SCHEMA_URI).errors(instance)
    assert sorted(format_path(error.path) for error in ours) == expected


def test_schema_quirk_env_items_are_unconstrained_but_strict_rules_catch_them():
    spec = minimal_spec(env=[5])
    assert Validator(_cdi_schema.RESOURCES, _cdi_schema.SCHEMA_URI).errors(spec) == []
    # Go decodes env into []string, so a number is refused there; the strict layer says where.
    assert _cdi.validate_spec(spec) == ["devices[0].containerEdits.env[0]: must be a string"]
    spec["devices"][0]["containerEdits"]["env"] = ["NOEQUALS"]
    assert _cdi.validate_spec(spec) == ['devices[0].containerEdits.env[0]: "NOEQUALS" must be KEY=VALUE']


# ----------------------------------------------------------------------------------------- Go library rules


def test_unknown_field_is_rejected_with_its_path():
    spec = minimal_spec(deviceNodes=[{"path": "/dev/card1", "hostpath": "/dev/card1"}])
    errors = _cdi.validate_spec(spec)
    assert len(errors) == 1
    assert errors[0].startswith("devices[0].containerEdits.deviceNodes[0].hostpath: unknown field (known: path, hostPath,")


def test_a_field_the_schema_already_flags_is_reported_once():
    spec = minimal_spec()
    spec["annotations"] = {"a.example.com/x": 1}
    assert _cdi.validate_spec(spec) == ["annotations.a.example.com/x: must be of type string, got number"]


def test_integral_float_passes_the_schema_but_not_the_go_int64_field():
    spec = minimal_spec(deviceNodes=[{"path": "/dev/card1", "major": 226.0}])
    assert _cdi.validate_spec(spec) == ["devices[0].containerEdits.deviceNodes[0].major: must be an integer"]


def test_file_mode_is_known_to_go_but_not_to_the_schema():
    spec = minimal_spec(deviceNodes=[{"path": "/dev/nvidia0", "fileMode": 438}])
    assert _cdi.validate_spec(spec) == []
    spec["devices"][0]["containerEdits"]["deviceNodes"][0]["fileMode"] = "0666"
    assert _cdi.validate_spec(spec) == ["devices[0].containerEdits.deviceNodes[0].fileMode: must be an integer"]


@pytest.mark.parametrize("kind, problem", [
    ("nvidia.com/gpu", ""),
    ("vendor.com/device", ""),
    ("nvidia.com/mig-1g.10gb", ""),
    ("nvidia.com", "must have the form vendor.com/class"),
    ("/gpu", "must have the form vendor.com/class"),
    ("nvidia.com/", "must have the form vendor.com/class"),
    ("1nvidia.com/gpu", "vendor '1nvidia.com' must start with a letter"),
    ("nvidia.com-/gpu", "vendor 'nvidia.com-' must end with a letter or digit"),
    ("nvidia.com/g=pu", "class 'g=pu' contains '='"),
    ("nvidia.com/gpu/x", "class 'gpu/x' contains '/'"),
    ("nvidia.com/_gpu", "class '_gpu' must start with a letter"),
])
def test_kind_syntax_follows_the_go_parser(kind, problem):
    message = _cdi.kind_error(kind)
    assert (problem in message) if problem else message == ""


@pytest.mark.parametrize("name, valid", [
    ("0", True), ("all", True), ("0:1", True), ("GPU-6cf00fa7-59ac-16f2-3e83-d24ccdc56f84", True),
    ("mig-gpu0-gi0-ci0", True), ("a.b_c", True), ("x", True),
    ("", False), ("-0", False), ("0-", False), ("gpu 0", False), ("gpu/0", False), ("gpu=0", False), ("é", False),
])
def test_device_name_syntax_follows_the_go_parser(name, valid):
    assert (_cdi.device_name_error(name) == "") is valid


def test_duplicate_device_names_are_rejected():
    spec = minimal_spec()
    spec["devices"].append(copy.deepcopy(spec["devices"][0]))
    assert _cdi.validate_spec(spec) == ["devices[1].name: device 'card1' is already defined by devices[0]"]


def test_spec_without_devices_is_rejected():
    spec = minimal_spec()
    spec["devices"] = []
    assert _cdi.validate_spec(spec) == ["devices: must define at least one device"]


@pytest.mark.parametrize("entry", ["FOO", "=FOO"])
def test_env_entries_must_be_key_value(entry):
    spec = minimal_spec()
    spec["containerEdits"] = {"env": ["OK=1", entry]}
    assert _cdi.validate_spec(spec) == ["containerEdits.env[1]: %s must be KEY=VALUE" % json.dumps(entry)]


def test_env_error_names_the_exact_device_and_index():
    spec = minimal_spec()
    spec["devices"] += [{"name": "card%d" % i, "containerEdits": {"env": ["A=1"]}} for i in (2, 3)]
    spec["devices"][2]["containerEdits"]["env"] = ["FOO"]
    assert _cdi.validate_spec(spec) == ['devices[2].containerEdits.env[0]: "FOO" must be KEY=VALUE']


def test_unknown_hook_name_and_empty_hook_path_are_rejected():
    spec = minimal_spec(hooks=[{"hookName": "preStart", "path": ""}])
    assert _cdi.validate_spec(spec) == [
        "devices[0].containerEdits.hooks[0].hookName: 'preStart' is not a hook name (prestart, createRuntime, "
        "createContainer, startContainer, poststart, poststop)",
        "devices[0].containerEdits.hooks[0].path: must not be empty",
    ]


@pytest.mark.parametrize("hook_name", _cdi.HOOK_NAMES)
def test_each_oci_hook_name_is_accepted(hook_name):
    assert _cdi.validate_spec(minimal_spec(hooks=[{"hookName": hook_name, "path": "/bin/true"}])) == []


def test_device_with_empty_edits_is_rejected_but_empty_spec_edits_are_fine():
    spec = minimal_spec()
    spec["devices"][0]["containerEdits"] = {"env": []}
    spec["containerEdits"] = {}
    assert _cdi.validate_spec(spec) == [
        "devices[0].containerEdits: a device needs at least one edit (env, deviceNodes, hooks, mounts, "
        "additionalGids, intelRdt or netDevices)"]


def test_device_node_type_and_permissions_are_checked():
    spec = minimal_spec(deviceNodes=[{"path": "/dev/card1", "type": "x", "permissions": "rwx"}])
    assert _cdi.validate_spec(spec) == [
        "devices[0].containerEdits.deviceNodes[0].type: 'x' is not a device type (b, c, u or p)",
        "devices[0].containerEdits.deviceNodes[0].permissions: 'rwx' may only contain r, w and m",
    ]


def test_mount_needs_host_and_container_path():
    spec = minimal_spec(mounts=[{"hostPath": "", "containerPath": ""}])
    assert _cdi.validate_spec(spec) == ["devices[0].containerEdits.mounts[0].hostPath: must not be empty",
                                        "devices[0].containerEdits.mounts[0].containerPath: must not be empty"]


def test_net_devices_need_unique_non_empty_names():
    spec = minimal_spec(netDevices=[{"hostInterfaceName": "eth1", "name": "net0"},
                                    {"hostInterfaceName": "eth1", "name": ""}])
    assert _cdi.validate_spec(spec) == [
        "devices[0].containerEdits.netDevices[1].hostInterfaceName: 'eth1' is already used by "
        "devices[0].containerEdits.netDevices[0]",
        "devices[0].containerEdits.netDevices[1].name: must not be empty",
    ]


@pytest.mark.parametrize("clos_id, valid", [("/", True), ("group1", True), (".", False), ("a/b", False), ("x" * 4096, False)])
def test_intel_rdt_clos_id_must_be_a_file_name(clos_id, valid):
    spec = minimal_spec(intelRdt={"closID": clos_id})
    assert (_cdi.validate_spec(spec) == []) is valid


def test_enable_cmt_is_refused_from_version_1_1_0_and_accepted_before():
    spec = minimal_spec(intelRdt={"closID": "g", "enableCMT": True})
    assert _cdi.validate_spec(spec) == [
        "devices[0].containerEdits.intelRdt.enableCMT: not valid for CDI spec version 1.1.0 (1.1.0 replaced it "
        "with enableMonitoring)"]
    spec["cdiVersion"] = "0.7.0"
    assert _cdi.validate_spec(spec) == []


def test_unreleased_version_is_rejected():
    spec = minimal_spec()
    spec["cdiVersion"] = "0.9.0"
    assert _cdi.validate_spec(spec)[0].startswith("cdiVersion: '0.9.0' is not a released CDI version")


def test_declared_version_lower_than_needed_is_rejected_with_the_reason():
    spec = load_fixture(BLOG_T4_PARTIAL)
    spec["cdiVersion"] = "0.6.0"
    errors = _cdi.validate_spec(spec)
    assert errors[0].startswith("cdiVersion: 0.6.0 is lower than 0.7.0, which the spec needs "
                                "(devices[0].containerEdits.additionalGids: additionalGids is set")


def test_leading_v_in_version_is_accepted_like_the_go_library():
    spec = minimal_spec()
    spec["cdiVersion"] = "v1.0.0"
    assert _cdi.validate_spec(spec) == []


# ----------------------------------------------------------------------------------------- version rules


@pytest.mark.parametrize("change, expected", [
    (lambda spec: None, "0.3.0"),
    (lambda spec: spec["devices"][0]["containerEdits"].update(mounts=[{"hostPath": "/a", "containerPath": "/a",
                                                                       "type": "bind"}]), "0.4.0"),
    (lambda spec: spec["devices"][0].update(name="0card"), "0.5.0"),
    (lambda spec: spec["devices"][0]["containerEdits"]["deviceNodes"][0].update(hostPath="/dev/x"), "0.5.0"),
    (lambda spec: spec.update(annotations={"a": "b"}), "0.6.0"),
    (lambda spec: spec["devices"][0].update(annotations={"a": "b"}), "0.6.0"),
    (lambda spec: spec.update(kind="vendor.com/mig-1g.5gb"), "0.6.0"),
    (lambda spec: spec.update(containerEdits={"additionalGids": [39]}), "0.7.0"),
    (lambda spec: spec["devices"][0]["containerEdits"].update(intelRdt={"closID": "g"}), "0.7.0"),
    (lambda spec: spec["devices"][0]["containerEdits"].update(intelRdt={"schemata": ["L3:0=ff"]}), "1.1.0"),
    (lambda spec: spec["devices"][0]["containerEdits"].update(intelRdt={"enableMonitoring": True}), "1.1.0"),
    (lambda spec: spec.update(containerEdits={"netDevices": [{"hostInterfaceName": "e", "name": "n"}]}), "1.1.0"),
])
def test_each_version_rule_raises_the_minimum(change, expected):
    spec = minimal_spec()
    change(spec)
    assert _cdi.minimum_version(spec)[0] == expected


def test_empty_additional_gids_and_false_monitoring_need_nothing_newer():
    spec = minimal_spec(additionalGids=[], intelRdt=None)
    assert _cdi.minimum_version(spec)[0] == "0.3.0"


def test_build_spec_computes_the_minimum_version_and_pin_lower_is_an_error():
    devices = [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]
    assert _cdi.build_spec("nvidia.com/gpu", devices)["cdiVersion"] == "0.5.0"
    assert _cdi.build_spec("nvidia.com/gpu", devices, cdi_version="0.6.0")["cdiVersion"] == "0.6.0"
    with pytest.raises(_cdi.CDIError, match=r"cdi_version: 0\.4\.0 is lower than 0\.5\.0.*devices\[0\]\.name"):
        _cdi.build_spec("nvidia.com/gpu", devices, cdi_version="0.4.0")
    with pytest.raises(_cdi.CDIError, match="not a released CDI version"):
        _cdi.build_spec("nvidia.com/gpu", devices, cdi_version="2.0")


def test_build_spec_keeps_the_go_field_order():
    spec = _cdi.build_spec("nvidia.com/gpu", [{"name": "a", "containerEdits": {"env": ["A=1"]}}],
                           {"env": ["B=2"]}, {"x": "y"})
    assert list(spec) == ["cdiVersion", "kind", "annotations", "devices", "containerEdits"]


# ----------------------------------------------------------------------------------------- facts


def facts_with(gpus, node_paths):
    return {"gpus": gpus, "device_nodes": [{"path": path, "major": 195, "minor": 0} for path in node_paths],
            "gpu_count": len(gpus)}


def test_facts_generator_names_gpus_by_index_and_uuid_with_all_last():
    facts = facts_with([{"index": 1, "uuid": "GPU-b", "mig_devices": []}, {"index": 0, "uuid": "GPU-a", "mig_devices": []}],
                       ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"])
    devices, spec_edits = _cdi.devices_from_facts(facts)
    assert [device["name"] for device in devices] == ["0", "GPU-a", "1", "GPU-b", "all"]
    assert devices[2]["containerEdits"] == {"deviceNodes": [{"path": "/dev/nvidia1"}]}
    assert devices[-1]["containerEdits"] == {"deviceNodes": [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}]}
    assert spec_edits == {"env": ["NVIDIA_VISIBLE_DEVICES=void"],
                          "deviceNodes": [{"path": "/dev/nvidia-uvm"}, {"path": "/dev/nvidiactl"}]}
    spec = _cdi.build_spec("nvidia.com/gpu", devices, spec_edits)
    assert spec["cdiVersion"] == "0.5.0"
    assert _cdi.validate_spec(spec) == []


def test_mig_cap_minors_match_the_driver_layout_for_every_mig_device_of_the_dra_fixture():
    spec = load_fixture(DRA_MIG)
    mig_devices = [device for device in spec["devices"] if device["name"].startswith("mig-")]
    assert len(mig_devices) == 960
    for device in mig_devices:
        gpu, gi, ci = (int(part[len(prefix):]) for part, prefix in zip(device["name"].split("-")[1:], ("gpu", "gi", "ci")))
        gi_minor, ci_minor = _cdi.mig_cap_minors(gpu, gi, ci)
        expected = {"/dev/nvidia-caps/nvidia-cap%d" % gi_minor, "/dev/nvidia-caps/nvidia-cap%d" % ci_minor,
                    "/dev/nvidia%d" % gpu}
        assert set(node["path"] for node in device["containerEdits"]["deviceNodes"]) == expected, device["name"]


def test_facts_generator_builds_mig_devices_with_caps_and_parent_node():
    mig = {"index": 0, "gpu_instance_id": 1, "compute_instance_id": 0, "memory_total_mib": 9856,
           "profile": "1g.10gb", "uuid": "MIG-4c1b8a3e-0000-5f5f-9a9a-000000000001"}
    facts = facts_with([{"index": 0, "uuid": "GPU-a", "mig_mode_current": True, "mig_devices": [mig]}],
                       ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"])
    devices, _spec_edits = _cdi.devices_from_facts(facts)
    assert [device["name"] for device in devices] == ["0", "GPU-a", "0:0", mig["uuid"], "all"]
    assert devices[2]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia0"}, {"path": "/dev/nvidia-caps/nvidia-cap12"}, {"path": "/dev/nvidia-caps/nvidia-cap13"}]
    assert len(devices[-1]["containerEdits"]["deviceNodes"]) == 3


def test_facts_generator_refuses_a_gpu_without_its_device_node():
    facts = facts_with([{"index": 0, "uuid": "GPU-a", "mig_devices": []}], [])
    with pytest.raises(_cdi.CDIError, match=r"GPU 0 needs /dev/nvidia0, which facts.device_nodes does not list"):
        _cdi.devices_from_facts(facts)


def test_facts_generator_refuses_missing_mig_cap_nodes_when_caps_are_listed():
    mig = {"index": 0, "gpu_instance_id": 2, "compute_instance_id": 0, "uuid": None}
    facts = facts_with([{"index": 0, "uuid": "GPU-a", "mig_devices": [mig]}],
                       ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap1"])
    with pytest.raises(_cdi.CDIError, match="nvidia-cap21"):
        _cdi.devices_from_facts(facts)


@pytest.mark.parametrize("gpu_without_index", [{"uuid": "GPU-b"}, {"index": None, "uuid": "GPU-b"}])
def test_facts_generator_names_the_gpu_that_has_no_index(gpu_without_index):
    facts = facts_with([{"index": 0, "uuid": "GPU-a", "mig_devices": []}, gpu_without_index], ["/dev/nvidia0"])
    with pytest.raises(_cdi.CDIError, match=r"a GPU in facts.gpus has no index \(uuid GPU-b\)"):
        _cdi.devices_from_facts(facts)


def test_facts_generator_refuses_facts_without_gpus():
    with pytest.raises(_cdi.CDIError, match="no GPUs"):
        _cdi.devices_from_facts({"gpus": [], "device_nodes": []})


# ----------------------------------------------------------------------------------------- staleness & compare


def test_missing_host_paths_after_a_driver_upgrade(tmp_path):
    root = str(tmp_path)
    spec = load_fixture(CTK_DEFAULT, driver_root=root)
    present = ["/dev/nvidia0", "/dev/nvidiactl", "/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.999.88.77"]
    for path in present:
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        open(root + path, "w").close()
    missing = _cdi.missing_host_paths(spec, os.path.exists)
    # libcuda of the old driver is gone; the hook binary lives outside the driver root and is not installed here.
    assert missing == [root + "/lib/x86_64-linux-gnu/libcuda.so.999.88.77", "/usr/bin/nvidia-cdi-hook"]


def test_host_paths_use_device_node_path_when_host_path_is_absent():
    spec = load_fixture(DOCKER_T4)
    paths = _cdi.host_paths(spec)
    assert "/dev/nvidia0" in paths and "/dev/nvidiactl" in paths
    assert "/usr/bin/nvidia-cdi-hook" in paths
    assert len(paths) == len(set(paths))


def test_specs_equal_ignores_key_order_and_omitted_empty_fields():
    spec = load_fixture(DOCKER_T4)
    reordered = json.loads(json.dumps(spec, sort_keys=True))
    reordered["devices"][0]["containerEdits"]["env"] = []
    reordered["annotations"] = {}
    assert _cdi.specs_equal(spec, reordered)
    reordered["devices"][0]["name"] = "1"
    assert not _cdi.specs_equal(spec, reordered)
    assert not _cdi.specs_equal(None, spec)


def test_duplicate_devices_only_counts_the_same_kind():
    spec = load_fixture(DOCKER_T4)
    other = {"kind": "nvidia.com/gpu", "devices": [{"name": "all"}, {"name": "7"}]}
    assert _cdi.duplicate_devices(spec, other) == ["all"]
    other["kind"] = "nvidia.com/mig"
    assert _cdi.duplicate_devices(spec, other) == []


# ----------------------------------------------------------------------------------------- text


@pytest.mark.parametrize("path, fmt", [("/etc/cdi/nvidia.yaml", "yaml"), ("/var/run/cdi/nvidia.json", "json")])
def test_format_follows_the_extension(path, fmt):
    assert _cdi.spec_format(path) == fmt


@pytest.mark.parametrize("path", ["/etc/cdi/nvidia.yml", "/etc/cdi/nvidia", "/etc/cdi/nvidia.yaml.tmp"])
def test_extensions_cdi_does_not_load_are_refused(path):
    with pytest.raises(_cdi.CDIError, match="must end in .yaml or .json"):
        _cdi.spec_format(path)


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_render_then_parse_gives_the_same_spec(fmt):
    spec = load_fixture(DOCKER_T4)
    text = _cdi.render(spec, fmt)
    assert _cdi.parse(text, fmt) == spec
    if fmt == "yaml":
        # Insertion order is kept (no sort), and the device name "0" stays a string.
        assert text.startswith("cdiVersion: 0.6.0\ncontainerEdits:\n")
        assert "name: '0'" in text


def test_yaml_without_pyyaml_is_written_as_json_and_read_back(monkeypatch):
    monkeypatch.setattr(_cdi, "HAS_YAML", False)
    spec = load_fixture(DOCKER_T4)
    text = _cdi.render(spec, "yaml")
    assert json.loads(text) == spec
    assert _cdi.parse(text, "yaml") == spec
    with pytest.raises(_cdi.YAMLUnavailableError, match="needs PyYAML"):
        _cdi.parse("cdiVersion: 0.6.0\n", "yaml")
