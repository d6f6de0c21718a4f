# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Golden tests: what the renderer writes equals what the real nvidia-ctk wrote for the same input."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.host import containerd_config as cc
from ansible_collections.gpuops.nvidia.plugins.module_utils.host import toml as _toml

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "containerd")
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
# The three runtimes nvidia-ctk-installer (the fixtures' source) always adds.
INSTALLER_RUNTIMES = [("nvidia", "/usr/bin/nvidia-container-runtime"),
                      ("nvidia-cdi", "/usr/bin/nvidia-container-runtime.cdi"),
                      ("nvidia-legacy", "/usr/bin/nvidia-container-runtime.legacy")]


def fixture(name):
    """The fixture text without the provenance comment lines the extractor put on top."""
    with open(os.path.join(FIXTURES, name)) as handle:
        return "".join(line for line in handle.read().splitlines(True) if not line.startswith("#"))


GOLDEN_CASES = [
    # (case prefix, input file or None, containerd version, set_as_default, enable_cdi)
    ("nvidia-ctk-installer_v2_no-toplevel", None, (1, 7, 27), False, False),
    ("nvidia-ctk-installer_v2_cdi-enabled", "__1_input_config.toml", (1, 7, 27), False, True),
    ("nvidia-ctk-installer_v3_set-as-default_options-inherited", "__1_input_config.toml", (2, 1, 4), True, False),
]


@pytest.mark.parametrize("case, input_suffix, containerd_version, set_as_default, enable_cdi", GOLDEN_CASES,
                         ids=[case[0] for case in GOLDEN_CASES])
def test_drop_in_equals_nvidia_ctk_output_byte_for_byte(case, input_suffix, containerd_version, set_as_default,
                                                        enable_cdi):
    main = _toml.loads(fixture(case + input_suffix)) if input_suffix else None
    version = cc.choose_config_version(containerd_version, main)
    drop_in = cc.render_drop_in(main, version, INSTALLER_RUNTIMES, set_as_default, enable_cdi)
    assert _toml.dumps(drop_in) == fixture(case + "__3_output_dropin_99-nvidia.toml")


@pytest.mark.parametrize("case, input_suffix, containerd_version, set_as_default, enable_cdi", GOLDEN_CASES,
                         ids=[case[0] for case in GOLDEN_CASES])
def test_main_config_gets_the_import_nvidia_ctk_added(case, input_suffix, containerd_version, set_as_default,
                                                      enable_cdi):
    text = fixture(case + input_suffix) if input_suffix else ""
    version = cc.choose_config_version(containerd_version, _toml.loads(text))
    new_text, changed = cc.add_import(text, version, DROP_IN)
    expected = fixture(case + "__2_output_toplevel_config.toml")
    assert changed
    assert _toml.loads(new_text) == _toml.loads(expected)
    if not input_suffix:
        assert new_text == expected
    else:
        # The user's file keeps its own layout: only the import line is new.
        assert new_text == 'imports = ["/etc/containerd/conf.d/*.toml"]\n' + text


def test_second_render_changes_nothing():
    text = fixture("nvidia-ctk-installer_v2_cdi-enabled__1_input_config.toml")
    once = cc.add_import(text, 2, DROP_IN)[0]
    twice, changed = cc.add_import(once, 2, DROP_IN)
    assert (twice, changed) == (once, False)


def test_debian_config_keeps_its_cni_dirs_in_the_drop_in_and_gets_no_cdi_keys_unasked():
    main = _toml.loads(fixture("debian12_containerd-1.6.20_etc_config.toml"))
    drop_in = cc.render_drop_in(main, cc.choose_config_version((1, 6, 20), main),
                                [("nvidia", "/usr/bin/nvidia-container-runtime")])
    cri = drop_in["plugins"][cc.CRI_PLUGIN_V2]
    assert cri["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": "/etc/cni/net.d"}
    assert cri["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2", "runtime_root": "", "runtime_engine": "",
        "privileged_without_host_devices": False, "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"}}
    assert "enable_cdi" not in cri and "cdi_spec_dirs" not in cri
    assert "plugins" not in main or "io.containerd.internal.v1.opt" not in drop_in["plugins"]


def test_runtime_options_come_from_the_non_nvidia_default_runtime_first():
    main = {"version": 2, "plugins": {cc.CRI_PLUGIN_V2: {"containerd": {
        "default_runtime_name": "crun",
        "runtimes": {"runc": {"options": {"SystemdCgroup": False}},
                     "crun": {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}}}}}}
    drop_in = cc.render_drop_in(main, 2, [("nvidia", "/x")], set_as_default=True, enable_cdi=True,
                                cdi_spec_dirs=["/etc/cdi", "/var/run/cdi"])
    cri = drop_in["plugins"][cc.CRI_PLUGIN_V2]
    assert cri["containerd"]["runtimes"]["nvidia"]["options"] == {"SystemdCgroup": True, "BinaryName": "/x"}
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["enable_cdi"] is True and cri["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    # The source is not modified.
    assert "nvidia" not in main["plugins"][cc.CRI_PLUGIN_V2]["containerd"]["runtimes"]


def test_an_nvidia_default_is_not_a_source_of_options():
    main = {"version": 3, "plugins": {cc.CRI_PLUGIN_V3: {"containerd": {
        "default_runtime_name": "nvidia", "runtimes": {"runc": {"options": {"Root": "/r"}}}}}}}
    drop_in = cc.render_drop_in(main, 3, [("nvidia", "/x")])
    assert drop_in["plugins"][cc.CRI_PLUGIN_V3]["containerd"]["runtimes"]["nvidia"]["options"] == {
        "Root": "/r", "BinaryName": "/x"}


@pytest.mark.parametrize("text, expected", [
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", (1, 6, 20)),
    ("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da", (1, 7, 27)),
    ("containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376", (2, 1, 4)),
])
def test_containerd_version_is_read_from_version_output(text, expected):
    assert cc.parse_containerd_version(text) == expected


def test_unreadable_version_is_refused():
    with pytest.raises(cc.ContainerdConfigError, match="cannot read the containerd version"):
        cc.parse_containerd_version("command not found")


@pytest.mark.parametrize("containerd_version, main, expected", [
    ((1, 6, 20), None, 2), ((1, 7, 0), {}, 2), ((2, 0, 0), None, 3), ((2, 1, 0), {"version": 2}, 2),
    ((2, 3, 1), {"version": 4}, 4),
])
def test_config_version_follows_the_main_config_or_the_containerd_release(containerd_version, main, expected):
    assert cc.choose_config_version(containerd_version, main) == expected


@pytest.mark.parametrize("containerd_version, main, message", [
    ((1, 7, 0), _toml.loads(fixture("nvidia-ctk-tests_input_config_v1.toml")), "version 1 config"),
    ((1, 7, 0), {"version": 3}, "reads at most version 2"),
    ((2, 1, 0), {"version": 4}, "reads at most version 3"),
])
def test_configs_containerd_would_not_read_are_refused(containerd_version, main, message):
    with pytest.raises(cc.ContainerdConfigError, match=message):
        cc.choose_config_version(containerd_version, main)


def test_cri_plugin_and_cdi_support_by_version():
    assert cc.cri_plugin_name(2) == "io.containerd.grpc.v1.cri"
    assert cc.cri_plugin_name(3) == cc.cri_plugin_name(4) == "io.containerd.cri.v1.runtime"
    assert not cc.cdi_supported((1, 6, 20)) and cc.cdi_supported((1, 7, 0)) and cc.cdi_supported((2, 0, 0))


def test_existing_imports_array_is_extended_in_place_keeping_comments():
    text = '# mine\nversion = 2\nimports = [\n  "/etc/containerd/other.toml", # keep\n]\n\n[plugins]\n'
    new_text, changed = cc.add_import(text, 2, DROP_IN)
    assert changed
    assert new_text == ('# mine\nversion = 2\nimports = ["/etc/containerd/other.toml", '
                        '"/etc/containerd/conf.d/*.toml"]\n\n[plugins]\n')


def test_import_goes_before_the_first_key_after_leading_comments():
    text = "# managed by hand\n\nversion = 2\n"
    assert cc.add_import(text, 2, DROP_IN)[0] == (
        '# managed by hand\n\nimports = ["/etc/containerd/conf.d/*.toml"]\nversion = 2\n')


def test_a_config_with_only_tables_gets_the_import_at_the_top():
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p"'
    new_text = cc.add_import(text, 2, DROP_IN)[0]
    assert _toml.loads(new_text)["imports"] == ["/etc/containerd/conf.d/*.toml"]


def test_an_import_glob_that_already_covers_the_drop_in_is_kept():
    text = 'imports = ["/etc/containerd/conf.d/*"]\nversion = 2\n'
    assert cc.add_import(text, 2, DROP_IN) == (text, False)


def test_imports_that_is_not_an_array_is_refused():
    with pytest.raises(cc.ContainerdConfigError, match="not an array"):
        cc.add_import('imports = "x"\nversion = 2\n', 2, DROP_IN)


def test_runtime_problems_read_a_real_dump():
    dump = _toml.loads(fixture("containerd-1.6.20_debian12_config-dump.toml"))
    problems = cc.runtime_problems(dump, 2, [("nvidia", "/usr/bin/nvidia-container-runtime")], True, True)
    assert problems == ["runtime nvidia: BinaryName is None, expected '/usr/bin/nvidia-container-runtime'",
                        "enable_cdi is not true in plugins.io.containerd.grpc.v1.cri",
                        "default_runtime_name is not nvidia"]
    merged = cc.render_drop_in(dump, 2, [("nvidia", "/usr/bin/nvidia-container-runtime")], True, True)
    assert cc.runtime_problems(merged, 2, [("nvidia", "/usr/bin/nvidia-container-runtime")], True, True) == []


def test_a_2x_dump_of_version_2_files_is_read_in_the_schema_the_binary_dumped():
    """Debian's containerd 2.1 package ships a version 2 config: the role keeps version 2 for its drop-in, and the
    real binary migrates both and dumps version 3, the runtimes and CDI under io.containerd.cri.v1.runtime."""
    dump = _toml.loads(fixture("containerd-2.1.9_debian-sid_v2-config-and-drop-in_config-dump.toml"))
    assert dump["version"] == 3 and "containerd" not in dump["plugins"].get(cc.CRI_PLUGIN_V2, {})
    nvidia = [("nvidia", "/usr/bin/nvidia-container-runtime")]
    assert cc.runtime_problems(dump, 2, nvidia, True, False) == []
    assert cc.runtime_problems(dump, 2, nvidia, True, True) == ["default_runtime_name is not nvidia"]


NVIDIA_2X = [("nvidia", "/usr/bin/nvidia-container-runtime"), ("nvidia-cdi", "/usr/bin/nvidia-container-runtime.cdi")]


def test_containerd_2x_default_dump_lacks_the_nvidia_runtimes_and_cdi_is_on_by_default():
    dump = _toml.loads(fixture("containerd-2.1.9_debian-sid_default_config-dump.toml"))
    assert dump["version"] == 3
    assert cc.choose_config_version(cc.parse_containerd_version(
        "containerd github.com/containerd/containerd/v2 2.1.9+unknown"), {}) == 3
    # containerd 2.x enables CDI by default (it was opt-in on 1.7): only the runtimes and the default are missing.
    assert cc.runtime_problems(dump, 3, NVIDIA_2X, True, True) == [
        "runtime nvidia: BinaryName is None, expected '/usr/bin/nvidia-container-runtime'",
        "runtime nvidia-cdi: BinaryName is None, expected '/usr/bin/nvidia-container-runtime.cdi'",
        "default_runtime_name is not nvidia"]


def test_containerd_2x_reads_the_rendered_version_3_drop_in():
    """The drop-in render_drop_in() writes for 2.1.9, as the real binary's `config dump` shows it merged."""
    dump = _toml.loads(fixture("containerd-2.1.9_debian-sid_nvidia-drop-in_config-dump.toml"))
    assert cc.runtime_problems(dump, 3, NVIDIA_2X, True, True) == []
    cri = dump["plugins"][cc.CRI_PLUGIN_V3]
    assert cri["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert cri["containerd"]["runtimes"]["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    # The images settings moved to their own plugin in version 3; the drop-in does not touch them.
    assert "io.containerd.cri.v1.images" in dump["plugins"]


def test_version_3_drop_in_has_no_keys_containerd_2x_ignores():
    """containerd 2.1.9 logged 'Ignoring unknown key' for runtime_engine/runtime_root in a version 3 drop-in."""
    drop_in = cc.render_drop_in({}, 3, NVIDIA_2X, True, True)
    for name, _binary in NVIDIA_2X:
        runtime = drop_in["plugins"][cc.CRI_PLUGIN_V3]["containerd"]["runtimes"][name]
        assert "runtime_engine" not in runtime and "runtime_root" not in runtime
    version_2 = cc.render_drop_in({}, 2, NVIDIA_2X, True, True)
    assert version_2["plugins"][cc.CRI_PLUGIN_V2]["containerd"]["runtimes"]["nvidia"]["runtime_engine"] == ""


DEBIAN_DUMP = "containerd-1.6.20_debian12_config-dump.toml"


def test_the_drop_in_repeats_runc_where_the_debian_config_names_no_runtime():
    """containerd 1.x replaces its built-in runtimes table with the drop-in's: without runc there, the recorded
    1.6.20 dump keeps default_runtime_name runc with no entry and the CRI plugin does not load."""
    main = _toml.loads(fixture("debian12_containerd-1.6.20_etc_config.toml"))
    dump = _toml.loads(fixture(DEBIAN_DUMP))
    completed = cc.with_built_in_runtimes(main, dump, 2)
    drop_in = cc.render_drop_in(completed, 2, [("nvidia", "/usr/bin/nvidia-container-runtime")])
    runtimes = drop_in["plugins"][cc.CRI_PLUGIN_V2]["containerd"]["runtimes"]
    dumped_runc = dump["plugins"][cc.CRI_PLUGIN_V2]["containerd"]["runtimes"]["runc"]
    assert runtimes["runc"] == dumped_runc
    assert runtimes["nvidia"]["options"] == dict(dumped_runc["options"],
                                                 BinaryName="/usr/bin/nvidia-container-runtime")
    assert drop_in["plugins"][cc.CRI_PLUGIN_V2]["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": "/etc/cni/net.d"}
    assert "runtimes" not in main["plugins"][cc.CRI_PLUGIN_V2].get("containerd", {}), "the source is not modified"


def test_the_recorded_broken_merge_is_named_by_the_dump_check():
    dump = _toml.loads(fixture("containerd-1.6.20_debian12_nvidia-only-drop-in_config-dump.toml"))
    assert "runc" not in dump["plugins"][cc.CRI_PLUGIN_V2]["containerd"]["runtimes"]
    problems = cc.runtime_problems(dump, 2, [("nvidia", "/usr/bin/nvidia-container-runtime")], False, False)
    assert problems == ["default_runtime_name runc has no entry in plugins.io.containerd.grpc.v1.cri's runtimes: "
                        "the CRI plugin would not load"]
    with open(os.path.join(FIXTURES, "containerd-1.6.20_debian12_nvidia-only-drop-in_cri-load-error.log")) as log:
        assert "no corresponding runtime configured in `containerd.runtimes`" in log.read()


def test_runtimes_the_main_config_names_are_its_own_and_ours_are_never_repeated():
    main = {"version": 2, "plugins": {cc.CRI_PLUGIN_V2: {"containerd": {"runtimes": {
        "runc": {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}}}}}}
    # a re-run: the dump shows our earlier drop-in (nvidia the default) over containerd's runc and a crun
    dump = {"version": 2, "plugins": {cc.CRI_PLUGIN_V2: {"containerd": {
        "default_runtime_name": "nvidia",
        "runtimes": {"runc": {"options": {"SystemdCgroup": False}}, "crun": {"options": {"BinaryName": "crun"}},
                     "nvidia": {"options": {"BinaryName": "/usr/bin/nvidia-container-runtime"}}}}}}}
    runtimes = cc.with_built_in_runtimes(main, dump, 2)["plugins"][cc.CRI_PLUGIN_V2]["containerd"]["runtimes"]
    assert runtimes == {"runc": {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}},
                        "crun": {"options": {"BinaryName": "crun"}}}


def test_a_dump_in_another_schema_is_not_used_and_no_dump_changes_nothing():
    main = _toml.loads(fixture("debian12_containerd-1.6.20_etc_config.toml"))
    dump_v3 = _toml.loads(fixture("containerd-2.1.9_debian-sid_v2-config-and-drop-in_config-dump.toml"))
    assert cc.with_built_in_runtimes(main, dump_v3, 2) is main
    assert cc.with_built_in_runtimes(main, None, 2) is main
    completed = cc.with_built_in_runtimes(None, _toml.loads(fixture(DEBIAN_DUMP)), 2)
    assert set(completed["plugins"][cc.CRI_PLUGIN_V2]["containerd"]["runtimes"]) == {"runc"}
