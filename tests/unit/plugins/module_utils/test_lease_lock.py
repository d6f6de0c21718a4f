# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.timestamps import parse_time
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.lease_lock import (
    STOLEN_ANNOTATION, TOKEN_ANNOTATION, decide, default_holder, lease_state, result_of, token_sha256_of)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "k8s")
T0 = parse_time("2026-12-03T03:00:00Z")


def request(**given):
    wanted = dict(state="acquired", name="gpu-rollout", namespace="kube-system", holder="alice@bastion/run-1",
                  ttl=600, steal_expired=False)
    wanted.update(given)
    return wanted


def acquired_by(holder, at=T0, ttl=600):
    lease = decide(None, request(holder=holder, ttl=ttl), at).body
    lease["metadata"]["resourceVersion"] = "41"
    return lease


def test_kubelet_lease_of_the_twin_reads_as_held_with_expiry():
    with open(os.path.join(FIXTURES, "lease_gpulab-twin_kubelet.json")) as stream:
        lease = json.load(stream)
    renewed = parse_time(lease["spec"]["renewTime"])
    state = lease_state(lease, renewed + 39)
    assert (state["holder"], state["ttl"], state["expires_at"], state["expired"]) == (
        "gpu-node-01", 40, renewed + 40, False)
    assert lease_state(lease, renewed + 40)["expired"] is True


def test_absent_lease_is_created_with_holder_ttl_and_times():
    decision = decide(None, request(), T0)
    assert (decision.action, decision.changed) == ("create", True)
    spec = decision.body["spec"]
    assert spec["holderIdentity"] == "alice@bastion/run-1" and spec["leaseDurationSeconds"] == 600
    assert spec["acquireTime"] == spec["renewTime"] == "2026-12-03T03:00:00.000000Z"
    assert decision.body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuops.nvidia"}
    assert result_of(decision.body, T0)["expires_at"] == "2026-12-03T03:10:00Z"


def test_second_holder_is_refused_naming_the_holder_and_since_when():
    decision = decide(acquired_by("alice@bastion/run-1"), request(holder="bob@laptop/run-7"), T0 + 60)
    assert decision.action == "fail"
    assert decision.message == ("lock kube-system/gpu-rollout is held by alice@bastion/run-1 since "
                                "2026-12-03T03:00:00Z (expires 2026-12-03T03:10:00Z)")


def test_holder_acquiring_again_changes_nothing():
    decision = decide(acquired_by("alice@bastion/run-1"), request(), T0 + 60)
    assert (decision.action, decision.changed) == ("none", False)


def test_expired_lock_is_taken_over_only_with_steal_expired():
    lease = acquired_by("alice@bastion/run-1")
    refused = decide(lease, request(holder="bob@laptop/run-7"), T0 + 601)
    assert refused.action == "fail" and "expired 2026-12-03T03:10:00Z" in refused.message
    assert "steal_expired" in refused.message
    taken = decide(lease, request(holder="bob@laptop/run-7", steal_expired=True), T0 + 601)
    assert taken.action == "update" and "took over the expired lock of alice@bastion/run-1" in taken.message
    assert taken.body["spec"]["holderIdentity"] == "bob@laptop/run-7"
    assert taken.body["spec"]["leaseTransitions"] == 1
    assert taken.body["metadata"]["resourceVersion"] == "41"   # the write is conditional on what was read


def test_steal_expired_does_not_take_a_live_lock():
    decision = decide(acquired_by("alice@bastion/run-1"), request(holder="bob@laptop/run-7", steal_expired=True),
                      T0 + 599)
    assert decision.action == "fail"


def test_renew_extends_from_now_and_only_for_the_holder():
    lease = acquired_by("alice@bastion/run-1")
    renewed = decide(lease, request(state="renewed", ttl=900), T0 + 300)
    assert renewed.action == "update"
    assert result_of(renewed.body, T0 + 300)["expires_at"] == "2026-12-03T03:20:00Z"
    assert result_of(renewed.body, T0 + 300)["acquired_at"] == "2026-12-03T03:00:00Z"
    other = decide(lease, request(state="renewed", holder="bob@laptop/run-7"), T0 + 300)
    assert other.action == "fail" and "held by alice@bastion/run-1" in other.message
    assert decide(None, request(state="renewed"), T0).action == "fail"


def test_release_by_holder_frees_it_and_by_anyone_else_fails():
    lease = acquired_by("alice@bastion/run-1")
    released = decide(lease, request(state="released"), T0 + 10)
    assert released.action == "update" and released.body["spec"]["holderIdentity"] is None
    assert lease_state(released.body, T0 + 10)["holder"] is None
    refused = decide(lease, request(state="released", holder="bob@laptop/run-7"), T0 + 10)
    assert refused.action == "fail"
    assert refused.message.startswith("cannot release lock kube-system/gpu-rollout as bob@laptop/run-7: it is held "
                                      "by alice@bastion/run-1")
    assert decide(released.body, request(state="released"), T0 + 20).action == "none"
    assert decide(None, request(state="released"), T0).action == "none"


def test_free_lease_is_taken_and_counts_a_transition():
    lease = acquired_by("alice@bastion/run-1")
    free = decide(lease, request(state="released"), T0 + 10).body
    taken = decide(free, request(holder="bob@laptop/run-7"), T0 + 20)
    assert taken.action == "update" and taken.body["spec"]["holderIdentity"] == "bob@laptop/run-7"
    assert taken.body["spec"]["leaseTransitions"] == 1


def test_default_holder():
    assert default_holder("sre", "bastion-1", "run-81234.9912") == "sre@bastion-1/run-81234.9912"


def acquired_with_token(token, holder="alice@bastion/run-1", at=T0):
    lease = decide(None, request(holder=holder, token_sha256=token_sha256_of(token)), at).body
    lease["metadata"]["resourceVersion"] = "41"
    return lease


def test_the_lease_keeps_the_hash_of_the_token_never_the_token():
    lease = acquired_with_token("s3cret-token-of-run-1-0123456789abcdef")
    assert lease["metadata"]["annotations"] == {TOKEN_ANNOTATION: token_sha256_of("s3cret-token-of-run-1-0123456789abcdef")}
    assert "s3cret" not in json.dumps(lease)


@pytest.mark.parametrize("state", ["acquired", "renewed", "released"])
@pytest.mark.parametrize("presented", [None, "another-token-0123456789abcdef0123456789"])
def test_the_holder_name_without_its_token_is_refused(state, presented):
    lease = acquired_with_token("token-of-run-1-0123456789abcdef0123456789")
    decision = decide(lease, request(state=state, token_sha256=token_sha256_of(presented)), T0 + 60)
    assert decision.action == "fail"
    assert decision.message.startswith("lock kube-system/gpu-rollout is held by alice@bastion/run-1 since ")
    assert "does not hold its token" in decision.message and decision.message.endswith("ask its holder")


def test_a_token_cannot_claim_a_lock_taken_by_name_alone():
    decision = decide(acquired_by("alice@bastion/run-1"), request(token_sha256=token_sha256_of("t" * 43)), T0 + 60)
    assert decision.action == "fail" and "does not hold its token" in decision.message


def test_the_token_holder_renews_and_releases_and_release_drops_the_hash():
    token = token_sha256_of("token-of-run-1-0123456789abcdef0123456789")
    lease = acquired_with_token("token-of-run-1-0123456789abcdef0123456789")
    assert decide(lease, request(token_sha256=token), T0 + 60).action == "none"
    assert decide(lease, request(state="renewed", token_sha256=token), T0 + 60).action == "update"
    released = decide(lease, request(state="released", token_sha256=token), T0 + 60).body
    assert TOKEN_ANNOTATION not in released["metadata"]["annotations"]


def test_an_expired_lock_of_the_same_name_whose_token_is_lost_is_taken_over_only_by_an_explicit_steal():
    lease = acquired_with_token("lost-token-0123456789abcdef0123456789abcd")
    fresh = token_sha256_of("new-token-0123456789abcdef0123456789abcdef")
    refused = decide(lease, request(token_sha256=fresh), T0 + 601)
    assert refused.action == "fail" and "take it over with steal_expired: true" in refused.message
    taken = decide(lease, request(token_sha256=fresh, steal_expired=True), T0 + 601)
    assert taken.action == "update"
    assert taken.stolen == {"by": "alice@bastion/run-1", "at": "2026-12-03T03:10:01Z", "from": "alice@bastion/run-1",
                            "expired_at": "2026-12-03T03:10:00Z"}
    assert json.loads(taken.body["metadata"]["annotations"][STOLEN_ANNOTATION]) == taken.stolen
    assert taken.body["metadata"]["annotations"][TOKEN_ANNOTATION] == fresh
    assert result_of(taken.body, T0 + 601)["last_steal"] == taken.stolen
