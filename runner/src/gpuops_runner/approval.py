"""The two-person rule (issue 24): plan files, SSH-signed approvals and the check `gpuops apply` makes.

Pure helpers; the only external command is `ssh-keygen -Y sign/verify` (namespace `gpuops-approval`).
A refusal is an `ApprovalRefused` carrying one line for stderr and its exit code (see EXIT_* below).
"""
from __future__ import annotations

import copy
import datetime
import hashlib
import json
import os
import subprocess
import tempfile

NAMESPACE = "gpuops-approval"
PLAN_FORMAT = 1
SSH_KEYGEN_TIMEOUT_S = 30
DEFAULT_APPROVAL_TTL_H = 24

# Exit codes of `gpuops apply PLAN` when the rule refuses (nothing ran). 3 is the runner's generic refusal.
EXIT_NO_APPROVAL = 3     # the change kind needs approval and there is none (or none by another identity)
EXIT_SELF_APPROVED = 10  # the only approval is by the applier
EXIT_REPLAN = 11         # the plan hash no longer matches (edited file, or the cluster/inputs changed): re-plan
EXIT_EXPIRED = 12        # the approval has expired
EXIT_BAD_SIGNATURE = 13  # the approval's signature does not verify against the allowed-signers file

# The risk table: which change kinds need a second person by default. The inventory's
# `gpuops_approval_policy` overrides it per kind.
DEFAULT_POLICY = {
    "driver_upgrade": {"require_approval": False},
    "node_labels": {"require_approval": True},
    "gpu_operator_uninstall": {"require_approval": True},
}


class ApprovalRefused(Exception):
    def __init__(self, exit_code, message):
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message


def canonical(data):
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def plan_hash(body):
    """sha256 over the plan's content (every key but `sha256`)."""
    content = {k: v for k, v in body.items() if k != "sha256"}
    return hashlib.sha256(canonical(content)).hexdigest()


def make_plan(change_kind, inputs, batches, cluster, collection_version, created_by, now, state=None):
    """The plan file's body; ``state`` is what the plan step saw of the nodes (e.g. each node's driver now)."""
    body = {
        "format": PLAN_FORMAT,
        "change_kind": change_kind,
        "inputs": copy.deepcopy(inputs),
        "batches": copy.deepcopy(batches),
        "cluster": cluster,
        "collection_version": collection_version,
        "created_by": created_by,
        "created_at": _ts(now),
    }
    if state is not None:
        body["state"] = copy.deepcopy(state)
    body["sha256"] = plan_hash(body)
    return body


def cluster_view(plan):
    """What a re-plan must reproduce: kind, inputs, batches, the nodes' state, cluster, collection version."""
    return {k: plan.get(k) for k in ("change_kind", "inputs", "batches", "state", "cluster", "collection_version")}


def default_policy(engine_kinds=None):
    """The risk table: DEFAULT_POLICY, then each change-engine kind's own default (``{kind: two_people}``, from the
    collection's kinds table: collection.change_kinds)."""
    merged = {k: dict(v) for k, v in DEFAULT_POLICY.items()}
    for kind, two_people in (engine_kinds or {}).items():
        merged[kind] = {"require_approval": bool(two_people)}
    return merged


def policy_for(change_kind, inventory_policy=None, engine_kinds=None):
    merged = default_policy(engine_kinds)
    for kind, rule in (inventory_policy or {}).items():
        merged.setdefault(kind, {}).update(rule or {})
    rule = merged.get(change_kind, {"require_approval": True})  # unknown kinds: two people
    return {
        "require_approval": bool(rule.get("require_approval", True)),
        "allowed_signers": rule.get("allowed_signers"),
        "ttl_hours": int(rule.get("ttl_hours", DEFAULT_APPROVAL_TTL_H)),
    }


def approval_statement(plan, approver, comment, now, ttl_hours):
    return {
        "plan_sha256": plan["sha256"],
        "change_kind": plan["change_kind"],
        "cluster": plan["cluster"],
        "approver": approver,
        "approved_at": _ts(now),
        "expires_at": _ts(now + datetime.timedelta(hours=ttl_hours)),
        "comment": comment or "",
    }


def _run(argv, data):
    return subprocess.run(argv, input=data, capture_output=True, timeout=SSH_KEYGEN_TIMEOUT_S, check=False)


def sign(statement, key_path):
    """The approval: statement plus an SSH signature (ssh-keygen -Y sign) over its canonical bytes."""
    proc = _run(["ssh-keygen", "-Y", "sign", "-n", NAMESPACE, "-f", key_path, "-q"], canonical(statement))
    if proc.returncode != 0:
        raise ApprovalRefused(EXIT_BAD_SIGNATURE, "gpuops: cannot sign with %s: %s"
                              % (key_path, proc.stderr.decode(errors="replace").strip()))
    return {"statement": statement, "signature": proc.stdout.decode("ascii")}


def verify_signature(approval, allowed_signers):
    statement = approval["statement"]
    if not allowed_signers:
        raise ApprovalRefused(EXIT_BAD_SIGNATURE, "gpuops: the policy names no allowed_signers file")
    with tempfile.NamedTemporaryFile("w", suffix=".sig", delete=False) as handle:
        handle.write(approval["signature"])
        sig_path = handle.name
    try:
        proc = _run(["ssh-keygen", "-Y", "verify", "-f", allowed_signers, "-I", statement["approver"],
                     "-n", NAMESPACE, "-s", sig_path], canonical(statement))
    finally:
        os.unlink(sig_path)
    if proc.returncode != 0:
        raise ApprovalRefused(EXIT_BAD_SIGNATURE, "gpuops: the approval by %s does not verify against %s"
                              % (statement.get("approver"), allowed_signers))


def check_apply(plan, approvals, applier, policy, now, current_view=None):
    """Raise ApprovalRefused unless `plan` may be applied by `applier`; return the approval used (or None)."""
    if plan.get("sha256") != plan_hash(plan):
        raise ApprovalRefused(EXIT_REPLAN, "gpuops: the plan file was changed after planning: re-plan")
    if current_view is not None and current_view != cluster_view(plan):
        raise ApprovalRefused(EXIT_REPLAN, "gpuops: the cluster or the inputs differ from the plan: re-plan")
    if not policy["require_approval"]:
        return None
    if not approvals:
        raise ApprovalRefused(EXIT_NO_APPROVAL, "gpuops: %s needs the approval of a second operator: "
                              "none found (gpuops approve PLAN)" % plan["change_kind"])
    problems = []
    for approval in approvals:
        statement = approval["statement"]
        if statement.get("plan_sha256") != plan["sha256"]:
            problems.append((EXIT_REPLAN, "gpuops: the approval is for another plan: re-plan and approve again"))
            continue
        try:
            verify_signature(approval, policy["allowed_signers"])
        except ApprovalRefused as refusal:
            problems.append((refusal.exit_code, refusal.message))
            continue
        if statement["approver"] == applier:
            problems.append((EXIT_SELF_APPROVED, "gpuops: the approval is by the applier (%s): "
                             "a second operator must approve" % applier))
            continue
        if _parse_ts(statement["expires_at"]) <= now:
            problems.append((EXIT_EXPIRED, "gpuops: the approval by %s expired at %s"
                             % (statement["approver"], statement["expires_at"])))
            continue
        return approval
    code, message = problems[0]
    raise ApprovalRefused(code, message)


def _ts(when):
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_ts(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
