"""gpuops.nvidia.rollout_lock over real HTTPS against the twin, run with real ansible: two operators racing for
the lock (exactly one wins, the other is told who holds it), expiry and steal, renew, release by a non-holder,
and the default holder staying the same across the tasks of one playbook run."""
from __future__ import annotations

import json
import subprocess
import time

from gpulab.testkit.modules import module_env, parse_adhoc, read_lease, run_module, start_module


def lock(lab, **args):
    return run_module(lab, "rollout_lock", dict({"namespace": "kube-system"}, **args))


def test_two_concurrent_holders_exactly_one_wins_and_the_other_is_told_who(lab):
    racers = {holder: start_module(lab, "rollout_lock", {"name": "race", "holder": holder, "ttl": 600})
              for holder in ("alice@bastion/run-1", "bob@laptop/run-2")}
    results = {}
    for holder, process in racers.items():
        stdout, stderr = process.communicate(timeout=180)
        results[holder] = (process.returncode == 0, parse_adhoc(stdout))
    winners = [holder for holder, (ok, _) in results.items() if ok]
    assert len(winners) == 1, results
    winner = winners[0]
    loser = next(holder for holder in results if holder != winner)
    ok, refused = results[loser]
    assert refused["msg"].startswith("lock kube-system/race is held by %s since " % winner)
    assert refused["holder"] == winner
    assert read_lease(lab, "kube-system", "race")["spec"]["holderIdentity"] == winner


def test_expired_lock_is_refused_then_stolen_only_with_steal_expired(lab):
    ok, first = lock(lab, name="expiry", holder="alice@bastion/run-1", ttl=1)
    assert ok and first["changed"] and first["holder"] == "alice@bastion/run-1"
    time.sleep(1.5)
    ok, refused = lock(lab, name="expiry", holder="bob@laptop/run-2")
    assert not ok
    assert "held by alice@bastion/run-1" in refused["msg"] and "expired" in refused["msg"]
    assert "steal_expired" in refused["msg"]
    ok, stolen = lock(lab, name="expiry", holder="bob@laptop/run-2", steal_expired=True)
    assert ok and stolen["changed"] and stolen["holder"] == "bob@laptop/run-2"
    assert stolen["transitions"] == 1 and "took over the expired lock of alice@bastion/run-1" in stolen["msg"]
    spec = read_lease(lab, "kube-system", "expiry")["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"], spec["leaseDurationSeconds"]) == (
        "bob@laptop/run-2", 1, 3600)


def test_release_by_a_non_holder_fails_and_leaves_the_lock(lab):
    assert lock(lab, name="release", holder="alice@bastion/run-1")[0]
    before = read_lease(lab, "kube-system", "release")
    ok, refused = lock(lab, name="release", holder="bob@laptop/run-2", state="released")
    assert not ok
    assert refused["msg"].startswith("cannot release lock kube-system/release as bob@laptop/run-2: it is held by "
                                     "alice@bastion/run-1")
    assert read_lease(lab, "kube-system", "release")["metadata"]["resourceVersion"] == \
        before["metadata"]["resourceVersion"]
    ok, released = lock(lab, name="release", holder="alice@bastion/run-1", state="released")
    assert ok and released["changed"] and released["holder"] is None
    ok, again = lock(lab, name="release", holder="alice@bastion/run-1", state="released")
    assert ok and not again["changed"]


def test_renew_moves_the_expiry_and_check_mode_writes_nothing(lab):
    ok, first = lock(lab, name="renew", holder="alice@bastion/run-1", ttl=60)
    assert ok
    version = read_lease(lab, "kube-system", "renew")["metadata"]["resourceVersion"]
    ok, checked = run_module(lab, "rollout_lock", {"name": "renew", "namespace": "kube-system",
                                                   "holder": "alice@bastion/run-1", "state": "renewed", "ttl": 600},
                             check=True)
    assert ok and checked["changed"]
    assert read_lease(lab, "kube-system", "renew")["metadata"]["resourceVersion"] == version
    time.sleep(1.1)
    ok, renewed = lock(lab, name="renew", holder="alice@bastion/run-1", state="renewed", ttl=600)
    assert ok and renewed["changed"] and renewed["acquired_at"] == first["acquired_at"]
    assert renewed["expires_at"] > first["expires_at"]
    ok, refused = lock(lab, name="renew", holder="bob@laptop/run-2", state="renewed")
    assert not ok and "held by alice@bastion/run-1" in refused["msg"]


def test_default_holder_is_one_run_of_one_user(lab, tmp_path):
    playbook = tmp_path / "lock.yml"
    playbook.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False,
        "module_defaults": {"group/gpuops.nvidia.k8s": {"kubeconfig": lab.info["kube"]["kubeconfig"]}},
        "tasks": [
            {"name": "take", "gpuops.nvidia.rollout_lock": {"name": "default-holder"}, "register": "taken"},
            {"name": "renew", "gpuops.nvidia.rollout_lock": {"name": "default-holder", "state": "renewed"}},
            {"name": "release", "gpuops.nvidia.rollout_lock": {"name": "default-holder", "state": "released"}},
            {"name": "show", "ansible.builtin.debug": {"msg": "HOLDER={{ taken.holder }}"}},
        ]}]))
    done = subprocess.run(["ansible-playbook", str(playbook)], capture_output=True, text=True, env=module_env(lab),
                          timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    holder = done.stdout.split("HOLDER=", 1)[1].split('"', 1)[0]
    assert holder.startswith("root@") and "/run-" in holder
    assert read_lease(lab, "kube-system", "default-holder")["spec"].get("holderIdentity") is None
