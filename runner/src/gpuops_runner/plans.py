"""`gpuops plan ... --out PLAN` and `gpuops apply PLAN`: the two-person rule (approval.py) over the runbook runs
(runbook.py), docs/operations.md.

The plan file comes from the runbook's own plan step, run as the dry run runs it: the result of its planning task
(for the driver upgrade, `gpuops.nvidia.driver_upgrade_plan`; for every kind of the change engine,
`gpuops.nvidia.change_plan` in `gpuops.nvidia.change`) gives the batches and the nodes' state. `apply`
refuses before anything runs unless the plan file is intact, the change kind's policy (`gpuops_approval_policy` in
the inventory, defaults from approval.DEFAULT_POLICY) is met, and a fresh dry run of the plan's inputs gives the
same plan; then it runs the runbook confirmed with the plan's inputs. Each decision is a line of the audit trail
naming the applier and the approver.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os

from gpuops_runner import approval, collection, exitcodes, inventory, options
from gpuops_runner.runbook import UPGRADE_KIND, RunbookRun, TrailUnwritable, operator

# A change kind: the runbook whose dry run plans it, the runbook that applies it, the planning task's action and
# how its result becomes the plan file's batches and node state.
ChangeKind = collections.namedtuple("ChangeKind", "plan_runbook apply_runbook plan_action read_plan")
POLICY_VAR = inventory.POLICY_VAR


def batches_of(plan):
    return [{"index": batch["index"], "kind": batch["kind"], "nodes": list(batch["nodes"])}
            for batch in plan.get("batches") or []]


def driver_upgrade_plan(result):
    """Batches and node state from the result of driver_upgrade_plan (its RETURN `plan`); None without a plan."""
    plan = (result or {}).get("plan")
    if not isinstance(plan, dict):
        return None
    batches = batches_of(plan)
    state = {
        "target_version": plan.get("target_version"),
        "install_method": (plan.get("install") or {}).get("method"),
        "nodes": {name: {"current_version": node.get("current_version"), "action": node.get("action")}
                  for name, node in sorted((plan.get("nodes") or {}).items())},
    }
    return batches, state


def change_plan(result):
    """Batches and state from the result of the change engine's change_plan (its RETURN `plan`): the change's id,
    each node's action (start, continue, skip, ...), the blockers and the budget; None without a plan."""
    plan = (result or {}).get("plan")
    if not isinstance(plan, dict) or not plan.get("change_id"):
        return None
    nodes = plan.get("nodes") or {}
    if isinstance(nodes, list):
        nodes = {node.get("name"): node for node in nodes}
    state = {
        "change_id": plan["change_id"],
        "kind": plan.get("kind"),
        "max_unavailable": plan.get("max_unavailable"),
        "blockers": list(plan.get("blockers") or []),
        "nodes": {name: {"action": node.get("action")} for name, node in sorted(nodes.items())},
    }
    return batches_of(plan), state


CHANGE_KINDS = {
    UPGRADE_KIND: ChangeKind("plan", "upgrade", "gpuops.nvidia.driver_upgrade_plan", driver_upgrade_plan),
}
# every kind of the change engine's table (docs/change_engine.md): planned and applied by gpuops.nvidia.change
ENGINE_KIND = ChangeKind("plan", "change", "gpuops.nvidia.change_plan", change_plan)


def kind_of(name):
    """How the change kind ``name`` is planned and applied (whether the collection knows it: RunbookRun)."""
    return CHANGE_KINDS.get(name, ENGINE_KIND)


def inputs_of(run):
    """What the plan records of the run's command line: the runbook, the inventory, the extra vars, the limit."""
    source = os.path.abspath(run.inventory) if os.path.exists(run.inventory) else run.inventory
    return {"inventory": source, "extra_vars": run.extra_vars, "limit": run.limit}


def identity_of(run):
    who = operator(run.events)
    return "%s@%s" % (who.get("sudo_user") or who.get("user"), who.get("host"))


def collection_version(run):
    return run.events.collection_info(collection.collection_root(run.collections_path)).get("version")


def planned(kind_name, run, created_by, now):
    """The plan body of a finished dry run, or None when its plan step gave no plan or no cluster is known."""
    found = kind_of(kind_name).read_plan(run.captured)
    if found is None or run.cluster is None:
        return None
    batches, state = found
    return approval.make_plan(kind_name, inputs_of(run), batches, run.cluster, collection_version(run), created_by,
                              now, state=state)


def blocked(body):
    """Why a plan cannot be approved as it is (the change engine's blockers: a node a previous run failed, another
    change in flight, ...), or None: approving a plan the runbook would refuse serves no one."""
    blockers = (body.get("state") or {}).get("blockers") or []
    if not blockers:
        return None
    return "the plan is blocked (%s)" % "; ".join(
        "%s: %s" % (item.get("node", "?"), item.get("reason")) if isinstance(item, dict) else str(item)
        for item in blockers)


def write_json(path, data):
    temporary = path + ".tmp"
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "w", encoding="utf-8") as stream:
        json.dump(data, stream, indent=1, sort_keys=True)
        stream.write("\n")
    os.replace(temporary, path)


def plan_to_file(args, out, err):
    """`gpuops plan [KIND] ... --out PLAN`: the dry run, then the plan file and a `plan` line in the trail."""
    kind_name = args.change or UPGRADE_KIND
    target = os.path.abspath(os.path.expanduser(options.text("--out", args.out)))
    if not os.path.isdir(os.path.dirname(target)):
        raise options.UsageError("--out", "%s is not in an existing directory" % target)
    run = RunbookRun(args, ask=None, out=out, err=err)
    run.capture_action = kind_of(kind_name).plan_action

    def write_plan(code):
        body = planned(kind_name, run, identity_of(run), datetime.datetime.now(datetime.timezone.utc))
        if body is None or blocked(body):
            reason = ("the inventory names no one cluster (%s on every host)" % inventory.CLUSTER_VAR
                      if run.cluster is None else "the plan step gave no plan" if body is None else blocked(body))
            err("gpuops: refused: %s: no plan file written" % reason)
            return exitcodes.REFUSED, {"reason": reason}
        try:
            write_json(target, body)
        except OSError as error:
            err("gpuops: --out: %s cannot be written (%s)" % (target, error.strerror or error))
            return exitcodes.USAGE, {"reason": "the plan file cannot be written"}
        run.record("plan", change_kind=kind_name, plan_sha256=body["sha256"], plan_file=target,
                   cluster=body["cluster"], created_by=body["created_by"], batches=body["batches"])
        err("gpuops: plan %s written to %s (%s, %d batch(es), sha256 %s)"
            % (kind_name, target, body["cluster"], len(body["batches"]), body["sha256"]))
        return code, {"plan_sha256": body["sha256"]}

    run.after_run = write_plan
    return run.execute()


def read_plan(path):
    try:
        with open(path, encoding="utf-8") as stream:
            plan = json.load(stream)
    except (OSError, ValueError) as error:
        raise options.UsageError("PLAN", "%s cannot be read as a plan file (%s)" % (path, error))
    if not isinstance(plan, dict) or not isinstance(plan.get("change_kind"), str) \
            or not options.CHANGE_KIND_PATTERN.match(plan["change_kind"]) or not isinstance(plan.get("inputs"), dict):
        raise options.UsageError("PLAN", "%s is not a plan file of gpuops plan --out" % path)
    return plan


def read_approvals(paths):
    found = []
    for path in paths:
        if not os.path.exists(path):
            continue
        try:
            with open(path, encoding="utf-8") as stream:
                signed = json.load(stream)
        except (OSError, ValueError) as error:
            raise options.UsageError("--approval", "%s cannot be read (%s)" % (path, error))
        if not isinstance(signed, dict) or not isinstance(signed.get("statement"), dict) \
                or not isinstance(signed.get("signature"), str):
            raise options.UsageError("--approval", "%s is not an approval (gpuops approve)" % path)
        found.append(signed)
    return found


def policy_of(change_kind, listing, engine_kinds=None):
    """The change kind's policy from the inventory (ApprovalRefused, exit 3, when it is malformed)."""
    try:
        return inventory.approval_policy(listing, change_kind, engine_kinds)
    except inventory.InventoryError as error:
        raise approval.ApprovalRefused(exitcodes.REFUSED, "gpuops: refused: %s" % error)


def prove_applier(plan, identity, key, allowed_signers):
    """The applier signs the plan's hash as ``identity``: only the holder of that identity's key in the
    allowed-signers file can claim it (else anyone could name a third person as the applier)."""
    if not identity or not key:
        raise approval.ApprovalRefused(exitcodes.REFUSED, "gpuops: refused: %s needs approval: the applier names "
                                                          "themself with --as ID --key KEY" % plan["change_kind"])
    statement = {"plan_sha256": plan["sha256"], "approver": identity, "purpose": "apply"}
    signed = approval.sign(statement, key)
    try:
        approval.verify_signature(signed, allowed_signers)
    except approval.ApprovalRefused as refusal:
        raise approval.ApprovalRefused(refusal.exit_code, "gpuops: --as %s: the key %s does not prove that identity "
                                                          "against the allowed-signers file" % (identity, key))


def run_args(args, runbook, change_kind, inputs, apply):
    """The command line of a runbook run made from the plan's inputs and the apply's own options."""
    extra_vars = inputs.get("extra_vars") or {}
    return argparse.Namespace(
        runbook=runbook, change=change_kind, inventory=inputs.get("inventory"),
        extra_vars=[json.dumps(extra_vars)] if extra_vars else [], apply=apply, ticket=args.ticket,
        confirm=args.confirm if apply else None, limit=inputs.get("limit"), diff=False,
        vault_password_file=args.vault_password_file, data_dir=args.data_dir, audit_log=args.audit_log,
        keep_runs=args.keep_runs, forks_cap=args.forks_cap, collections_path=args.collections_path,
        verbose=args.verbose, quiet=args.quiet)


def differences(plan, view):
    wanted = approval.cluster_view(plan)
    return sorted(key for key in wanted if wanted[key] != view.get(key))


def apply_plan(args, ask, out, err):
    """`gpuops apply PLAN --ticket ...`: the checks of the two-person rule, the re-plan, then the confirmed run."""
    plan = read_plan(args.plan)
    kind = kind_of(plan["change_kind"])
    inputs = plan["inputs"]
    if not isinstance(inputs.get("inventory"), str):
        raise options.UsageError("PLAN", "%s names no inventory" % args.plan)
    run = RunbookRun(run_args(args, kind.apply_runbook, plan["change_kind"], inputs, apply=True), ask=ask, out=out,
                     err=err)
    try:
        os.makedirs(run.data_dir, mode=0o700, exist_ok=True)
    except OSError as error:
        raise options.UsageError("--data-dir", "%s cannot be created (%s)" % (run.data_dir, error.strerror))
    try:
        run.chain.check_writable(run.audit_log)
    except OSError as error:
        raise TrailUnwritable("--audit-log: %s cannot be written (%s)" % (run.audit_log, error.strerror or error))
    about = {"change_kind": plan["change_kind"], "plan_sha256": plan.get("sha256"),
             "plan_file": os.path.abspath(args.plan), "cluster": plan.get("cluster"),
             "planned_by": plan.get("created_by"), "applier": args.identity or identity_of(run),
             "ticket": run.ticket, "operator": operator(run.events)}
    approval_files = args.approvals or [args.plan + ".approval.json"]

    def refuse(refusal, **fields):
        run.record("apply_refused", reason=refusal.message, exit_code=refusal.exit_code, **dict(about, **fields))
        err(refusal.message)
        return refusal.exit_code

    try:
        if plan.get("sha256") != approval.plan_hash(plan):
            raise approval.ApprovalRefused(approval.EXIT_REPLAN, "gpuops: %s was changed after planning (its sha256 "
                                                                 "does not match): re-plan" % args.plan)
        try:
            environ = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=run.collections_path)
            listing = inventory.read_inventory(inputs["inventory"], environ, run.vault_password_file)
        except inventory.InventoryError as error:
            raise approval.ApprovalRefused(exitcodes.REFUSED, "gpuops: refused: -i/--inventory: %s" % error)
        policy = policy_of(plan["change_kind"], listing, run.engine_kinds)
        if policy["require_approval"]:
            prove_applier(plan, args.identity, args.key and os.path.expanduser(args.key), policy["allowed_signers"])
        used = approval.check_apply(plan, read_approvals(approval_files), args.identity, policy,
                                    datetime.datetime.now(datetime.timezone.utc))
    except approval.ApprovalRefused as refusal:
        return refuse(refusal)
    approver = None
    if used is not None:
        statement = used["statement"]
        approver = statement["approver"]
        about["approver"] = approver
        run.record("approval", approved_at=statement["approved_at"], expires_at=statement["expires_at"],
                   comment=statement.get("comment", ""), **about)
    # the re-plan: the dry run of the plan's inputs against the cluster as it is now
    replan = RunbookRun(run_args(args, kind.plan_runbook, plan["change_kind"], inputs, apply=False), ask=None, out=out,
                        err=err)
    replan.capture_action = kind.plan_action
    code = replan.execute()
    fresh = planned(plan["change_kind"], replan, plan.get("created_by"),
                    datetime.datetime.now(datetime.timezone.utc)) if code == exitcodes.DONE else None
    if fresh is None:
        return refuse(approval.ApprovalRefused(code or exitcodes.REFUSED, "gpuops: refused: the re-plan (run %s) "
                                               "gave no plan (exit %d): nothing was applied" % (replan.run_id, code)),
                      replan_run_id=replan.run_id)
    changed = differences(plan, approval.cluster_view(fresh))
    if changed:
        return refuse(approval.ApprovalRefused(approval.EXIT_REPLAN, "gpuops: the cluster or the inputs differ from "
                                               "the plan (%s): re-plan" % ", ".join(changed)),
                      replan_run_id=replan.run_id, changed=changed)
    run.record("apply", replan_run_id=replan.run_id, **about)
    run.from_plan = plan["sha256"]
    run.start_fields = {"plan_sha256": plan["sha256"], "applier": about["applier"], "approver": approver}
    return run.execute()
