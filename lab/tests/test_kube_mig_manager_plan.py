"""The twin's MIG Manager (`gpulab.kube.sim.migmanager`): what a mig-parted layout turns into on a node's GPUs."""
from __future__ import annotations

from gpulab.kube.sim.migmanager import CONFIG_KEY, DEFAULT_CONFIGS, config_map_manifest, parse_configs, plan_commands


def gpus(count=2, enabled=(), devices=None):
    devices = devices or {}
    return [{"index": index, "mig_enabled": index in enabled,
             "mig_devices": [{"profile": profile} for profile in devices.get(index, [])]} for index in range(count)]


def test_the_default_config_map_holds_mig_parted_named_layouts():
    configs = parse_configs(config_map_manifest()["data"][CONFIG_KEY])
    assert {"all-disabled", "all-1g.10gb", "all-balanced"} <= set(configs)
    assert configs["all-1g.10gb"] == DEFAULT_CONFIGS["all-1g.10gb"]


def test_a_gpu_out_of_mig_mode_is_switched_reset_and_partitioned():
    layout = [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "1g.10gb": 2}}]
    assert plan_commands(layout, gpus()) == [
        ["nvidia-smi", "-i", "0", "-mig", "1"], ["nvidia-smi", "-i", "0", "-r"],
        ["nvidia-smi", "mig", "-i", "0", "-cgi", "3g.40gb,1g.10gb,1g.10gb", "-C"]]


def test_a_gpu_already_as_the_layout_wants_is_left_alone_and_a_different_one_is_redone():
    layout = [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "3g.40gb": 1}}]
    current = gpus(enabled=(0, 1), devices={0: ["3g.40gb", "4g.40gb"], 1: ["7g.80gb"]})
    assert plan_commands(layout, current) == [
        ["nvidia-smi", "mig", "-i", "1", "-dci"], ["nvidia-smi", "mig", "-i", "1", "-dgi"],
        ["nvidia-smi", "mig", "-i", "1", "-cgi", "4g.40gb,3g.40gb", "-C"]]


def test_all_disabled_turns_mig_mode_off_where_it_is_on():
    assert plan_commands(DEFAULT_CONFIGS["all-disabled"], gpus(enabled=(1,), devices={1: ["7g.80gb"]})) == [
        ["nvidia-smi", "-i", "1", "-mig", "0"], ["nvidia-smi", "-i", "1", "-r"]]
