"""The bastion's settings a run gets: forks from the inventory's node count (floor 5, capped), pipelining, and a
ControlPersist longer than the runbook's longest step; an operator's own environment wins, and the plan says so."""
from __future__ import annotations

import os

import pytest

from gpuops_runner import controller
from gpuops_runner.cli import build_parser

SPEC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "playbooks", "specs",
                    "driver_upgrade.yml")


@pytest.mark.parametrize("nodes, cap, forks", [(1, 50, 5), (8, 50, 8), (64, 50, 50), (2000, 50, 50), (2000, 200, 200),
                                               (16, 10, 10)])
def test_forks_follow_the_fleet_between_the_floor_and_the_cap(nodes, cap, forks):
    assert controller.forks_for(nodes, cap) == forks
    chosen = controller.settings(nodes, SPEC, {}, environ={}, forks_cap=cap)
    assert chosen.env["ANSIBLE_FORKS"] == str(forks)


def test_control_persist_outlives_the_longest_step_of_the_runbook_spec():
    # driver_upgrade.yml's largest *_timeout default: the wait for matching pods to finish, 3600 s
    assert controller.longest_step_s(SPEC, {}) == 3600
    chosen = controller.settings(8, SPEC, {}, environ={})
    assert chosen.env["ANSIBLE_SSH_ARGS"] == "-C -o ControlMaster=auto -o ControlPersist=3720s"
    assert chosen.env["ANSIBLE_PIPELINING"] == "True"


def test_a_longer_timeout_given_as_an_extra_var_lengthens_control_persist():
    assert controller.longest_step_s(SPEC, {"gpuops_drain_timeout": "7200"}) == 7200
    assert controller.settings(8, SPEC, {"gpuops_drain_timeout": 7200}, environ={}).env["ANSIBLE_SSH_ARGS"].endswith(
        "ControlPersist=7320s")


def test_a_bad_or_missing_spec_falls_back_to_the_floor(tmp_path):
    assert controller.longest_step_s(str(tmp_path / "none.yml"), {}) is None
    broken = tmp_path / "broken.yml"
    broken.write_text("argument_specs: [")
    assert controller.longest_step_s(str(broken), {"gpuops_drain_timeout": "x"}) is None
    chosen = controller.settings(3, str(broken), {}, environ={})
    assert chosen.env["ANSIBLE_SSH_ARGS"].endswith("ControlPersist=600s")
    assert "ControlPersist 600s (floor)" in chosen.line()


def test_the_operators_environment_wins_and_the_line_names_where_each_value_comes_from():
    environ = {"ANSIBLE_FORKS": "12", "ANSIBLE_PIPELINING": "false", "ANSIBLE_SSH_ARGS": "-o ControlPersist=60s"}
    chosen = controller.settings(400, SPEC, {}, environ=environ)
    assert chosen.env == {}
    assert chosen.line() == ("controller: forks 12 (ANSIBLE_FORKS); pipelining off (ANSIBLE_PIPELINING); "
                             "ssh_args -o ControlPersist=60s (ANSIBLE_SSH_ARGS)")
    assert chosen.as_record() == {"forks": "12", "pipelining": "off", "ssh_args": "-o ControlPersist=60s"}


def test_the_default_line_of_a_plan():
    chosen = controller.settings(16, SPEC, {}, environ={})
    assert chosen.line() == ("controller: forks 16 (16 nodes, cap 50); pipelining on (gpuops default); "
                             "ControlPersist 3720s (longest step 3600s + 120s)")


def test_forks_cap_is_an_option_of_every_runbook_command():
    assert build_parser().parse_args(["upgrade", "-i", "inv"]).forks_cap == controller.FORKS_CAP_DEFAULT
    assert build_parser().parse_args(["plan", "-i", "inv", "--forks-cap", "200"]).forks_cap == 200
    with pytest.raises(SystemExit):
        build_parser().parse_args(["plan", "-i", "inv", "--forks-cap", "0"])
