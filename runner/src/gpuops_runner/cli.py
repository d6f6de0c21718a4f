"""gpuops: the command line (see docs/runner.md). Errors go to stderr, one line naming the option, with the
documented exit code; no traceback reaches the user (GPUOPS_DEBUG=1 shows it)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import traceback

from gpuops_runner import __version__, approval, collection, controller, exitcodes, options, plans
from gpuops_runner.runbook import RUNBOOKS, RunbookRun, TrailUnwritable

DEFAULT_DATA_DIR = os.environ.get("GPUOPS_DATA_DIR", "~/.local/share/gpuops")
DEFAULT_KEEP_RUNS = 50
EPILOG = ("exit codes: 0 done, 2 usage, 3 refused, 4 gate failed, 5 node failed, 6 interrupted, 7 ansible error, "
          "8 audit trail not writable; apply PLAN also: 10 approved by the applier, 11 re-plan, 12 approval expired, "
          "13 signature does not verify; audit verify: 0 intact, 1 tampered, 2 unreadable, 3 key problem")


def version_text():
    versions = []
    for name in ("ansible-core", "ansible-runner"):
        try:
            from importlib import metadata

            versions.append("%s %s" % (name, metadata.version(name)))
        except Exception:  # pylint: disable=broad-exception-caught  # not installed: say so, never fail --version
            versions.append("%s not installed" % name)
    return "gpuops %s (%s)" % (__version__, ", ".join(versions))


def add_runbook_parser(commands, name):
    runbook = RUNBOOKS[name]
    description = "gpuops %s: %s. Runs gpuops.nvidia.%s." % (name, runbook.summary, runbook.playbook)
    sub = commands.add_parser(name, help=runbook.summary, epilog=EPILOG, description=description)
    sub.set_defaults(runbook=name)
    if name == "plan":
        sub.add_argument("change", nargs="?", type=options.change_kind, metavar="CHANGE_KIND",
                         help="the change kind to plan: driver_upgrade (the default) or a kind of the change "
                              "engine's table (node_labels, device_plugin_config, ...: docs/change_engine.md)")
        sub.add_argument("--out", metavar="PLAN",
                         help="write the plan file for gpuops approve / gpuops apply (docs/operations.md)")
    if name == "change":
        sub.add_argument("change", type=options.change_kind, metavar="CHANGE_KIND",
                         help="the change kind (node_labels, device_plugin_config, containerd_config, ...: "
                              "docs/change_engine.md); its inputs go in -e gpuops_change_inputs=...")
    sub.add_argument("-i", "--inventory", required=True,
                     help="any inventory source ansible accepts: a file, a directory, a script or plugin "
                          "configuration, or host1,host2,")
    sub.add_argument("-e", "--extra-var", dest="extra_vars", action="append", default=[], metavar="KEY=VALUE",
                     help="extra variables as ansible-playbook reads them: KEY=VALUE (a string), a JSON/YAML "
                          "mapping or @FILE (repeatable). Data only: refused when a value holds a Jinja template, "
                          "a name looks secret or is reserved (gpuops_ticket, gpuops_confirm, gpuops_run_id, "
                          "gpuops_cluster_name, ansible_*, gpuops_audit_*)")
    if runbook.apply_allowed:
        sub.add_argument("--apply", action="store_true", help="change the nodes (default: --check dry run)")
    else:
        sub.set_defaults(apply=False)
    sub.add_argument("--ticket", help="change/incident id (printable ASCII, no spaces), required with --apply, "
                                      "recorded in the audit trail")
    sub.add_argument("--confirm", metavar="CLUSTER", help="the cluster name typed (else asked on the terminal); "
                                                          "every inventory host must carry it")
    sub.add_argument("--limit", help="ansible --limit pattern" + (
        ": the nodes to repair, required (without it the run is refused, exit 3)" if runbook.repairs else ""))
    sub.add_argument("--diff", action="store_true", help="ansible --diff")
    sub.add_argument("--vault-password-file", help="passed to ansible by path (its content is never copied)")
    sub.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="runs/ and audit.jsonl live here "
                                                                  "(default %(default)s, $GPUOPS_DATA_DIR)")
    sub.add_argument("--audit-log", help="audit trail file (default DATA_DIR/audit.jsonl); must be writable "
                                         "before anything runs")
    sub.add_argument("--keep-runs", type=options.positive_int, default=DEFAULT_KEEP_RUNS,
                     help="run folders kept under DATA_DIR/runs (default %(default)s)")
    sub.add_argument("--forks-cap", type=options.positive_int, default=controller.FORKS_CAP_DEFAULT,
                     help="most forks the run gets (default %(default)s): forks are the inventory's node count, at "
                          "least 5 and at most this; ANSIBLE_FORKS set in the environment wins")
    sub.add_argument("--collections-path", help="folder holding ansible_collections/gpuops/nvidia (default: "
                                                "where ansible finds collections: $ANSIBLE_COLLECTIONS_PATH, "
                                                "collections_path of ansible.cfg, the defaults)")
    shown = sub.add_mutually_exclusive_group()
    shown.add_argument("-v", "--verbose", action="store_true", help="show ansible's own output")
    shown.add_argument("-q", "--quiet", action="store_true", help="hide the progress lines (the summary stays)")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="gpuops", description="Run the gpuops.nvidia runbooks with an audit trail (dry run unless --apply).",
        epilog=EPILOG)
    parser.add_argument("--version", action="version", version=version_text())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in RUNBOOKS:
        add_runbook_parser(commands, name)
    audit = commands.add_parser("audit", help="audit trail tools: verify a trail",
                                description="Audit trail tools.").add_subparsers(dest="audit_command", required=True)
    verify = audit.add_parser(
        "verify", epilog=EPILOG,
        help="check the trail: hash chain, HMAC (with $GPUOPS_AUDIT_HMAC_KEY) and anchors",
        description="Check a trail: the hash chain, the HMAC of each line when $GPUOPS_AUDIT_HMAC_KEY is set, and "
                    "that each anchor is the head of some prefix of the trail (docs/audit.md).")
    verify.add_argument("file")
    verify.add_argument("--anchor", "--head", dest="anchors", action="append", default=[], metavar="SHA256",
                        help="a digest the trail must contain as the head of a prefix: the head a run printed or "
                             "the report shows (repeatable; --head is the old name)")
    verify.add_argument("--anchors-from", action="append", default=[], metavar="FILE",
                        help="a file of anchors: a syslog/journald export of the forwarded lines, or digests one a "
                             "line (repeatable)")
    verify.add_argument("--require-anchored-head", action="store_true",
                        help="fail when lines follow the newest anchor (use with a complete syslog export)")
    verify.add_argument("--allow-unsigned", action="store_true",
                        help="with a key: list lines written without it (or with another key id) instead of failing")
    verify.add_argument("--collections-path")
    approve = commands.add_parser(
        "approve", help="approve a plan file as the second operator (the two-person rule, docs/operations.md)",
        description="Sign an approval of PLAN with your SSH key (ssh-keygen -Y sign, namespace gpuops-approval); "
                    "it is written to PLAN.approval.json unless --out says where.")
    approve.add_argument("plan")
    approve.add_argument("--key", required=True, help="your SSH private key (e.g. ~/.ssh/id_ed25519)")
    approve.add_argument("--as", dest="identity", required=True,
                         help="your identity as the policy's allowed-signers file names it (e.g. bob@ops)")
    approve.add_argument("--comment", default="")
    approve.add_argument("--ttl-hours", type=options.positive_int, default=approval.DEFAULT_APPROVAL_TTL_H,
                         help="how long the approval is valid (default %(default)s)")
    approve.add_argument("--out", help="where the approval is written (default PLAN.approval.json)")
    add_apply_parser(commands)
    return parser


def add_run_options(sub):
    """The options of a run that do not change what it does (where things go, how it is shown)."""
    sub.add_argument("--vault-password-file", help="passed to ansible by path (its content is never copied)")
    sub.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="runs/ and audit.jsonl live here "
                                                                  "(default %(default)s, $GPUOPS_DATA_DIR)")
    sub.add_argument("--audit-log", help="audit trail file (default DATA_DIR/audit.jsonl)")
    sub.add_argument("--keep-runs", type=options.positive_int, default=DEFAULT_KEEP_RUNS,
                     help="run folders kept under DATA_DIR/runs (default %(default)s)")
    sub.add_argument("--forks-cap", type=options.positive_int, default=controller.FORKS_CAP_DEFAULT,
                     help="most forks the run gets (default %(default)s)")
    sub.add_argument("--collections-path", help="folder holding ansible_collections/gpuops/nvidia")
    shown = sub.add_mutually_exclusive_group()
    shown.add_argument("-v", "--verbose", action="store_true", help="show ansible's own output")
    shown.add_argument("-q", "--quiet", action="store_true", help="hide the progress lines (the summary stays)")


def add_apply_parser(commands):
    sub = commands.add_parser(
        "apply", help="apply a plan file under the two-person rule (docs/operations.md)", epilog=EPILOG,
        description="Check PLAN (its sha256, the change kind's gpuops_approval_policy from the inventory, the "
                    "approval of a second operator), plan again against the cluster (any difference: re-plan), "
                    "then run the runbook confirmed with the plan's inputs.")
    sub.add_argument("plan")
    sub.add_argument("--ticket", required=True, help="change/incident id, recorded in the audit trail")
    sub.add_argument("--approval", dest="approvals", action="append", default=[], metavar="FILE",
                     help="an approval from gpuops approve (repeatable; default PLAN.approval.json)")
    sub.add_argument("--as", dest="identity", help="your identity as the allowed-signers file names it (needed "
                                                   "when the change kind needs approval)")
    sub.add_argument("--key", help="your SSH private key: proves --as (needed when the change kind needs approval)")
    sub.add_argument("--confirm", metavar="CLUSTER", help="the cluster name typed (else asked on the terminal)")
    add_run_options(sub)


def approve_plan(args, out, err):
    try:
        with open(args.plan, encoding="utf-8") as stream:
            plan = json.load(stream)
    except (OSError, ValueError) as error:
        raise options.UsageError("PLAN", "%s cannot be read as a plan file (%s)" % (args.plan, error))
    if not isinstance(plan, dict) or plan.get("sha256") != approval.plan_hash(plan):
        err("gpuops: %s does not match its sha256 (edited after planning): re-plan" % args.plan)
        return approval.EXIT_REPLAN
    statement = approval.approval_statement(plan, options.text("--as", args.identity, no_spaces=True),
                                            options.text("--comment", args.comment) if args.comment else "",
                                            datetime.datetime.now(datetime.timezone.utc), args.ttl_hours)
    try:
        signed = approval.sign(statement, os.path.expanduser(args.key))
    except approval.ApprovalRefused as refusal:
        err(refusal.message)
        return refusal.exit_code
    target = args.out or args.plan + ".approval.json"
    with open(target, "w", encoding="utf-8") as stream:
        json.dump(signed, stream, indent=1, sort_keys=True)
    out("%s: approved by %s until %s (plan %s)"
        % (target, statement["approver"], statement["expires_at"], plan["sha256"][:16]))
    return exitcodes.DONE


def read_anchors(chain, args):
    anchors = []
    for value in args.anchors:
        value = value.strip().lower()
        if not chain.DIGEST.match(value):
            raise options.UsageError("--anchor", "%r is not a sha256 hex digest" % value[:80])
        anchors.append(value)
    for path in args.anchors_from:
        try:
            with open(path, "rb") as stream:
                anchors += chain.anchors_from_text(stream.read().decode("utf-8", errors="replace"))
        except OSError as error:
            raise options.UsageError("--anchors-from", "%s cannot be read (%s)" % (path, error.strerror))
    return anchors


def verify(args, out, err):
    explicit = (options.existing_directory("--collections-path", args.collections_path)
                if args.collections_path is not None else None)
    chain = collection.audit_api(collection.find_collections_path(explicit))[0]
    anchors = read_anchors(chain, args)
    key = os.environ.get("GPUOPS_AUDIT_HMAC_KEY")
    try:
        verdict = chain.verify_file(args.file, key.encode("utf-8") if key else None, anchors,
                                    allow_unsigned=args.allow_unsigned,
                                    require_anchored_head=args.require_anchored_head)
    except OSError as error:
        err("gpuops audit verify: FILE: %s cannot be read (%s)" % (args.file, error.strerror or error))
        return exitcodes.UNREADABLE
    checked = "hash chain and HMAC" if verdict["hmac_checked"] else "hash chain (no HMAC key given)"
    if anchors:
        checked += ", %d anchor(s), the newest at line %s" % (len(anchors), verdict["anchored_to"])
    if verdict["first_bad"]:
        bad = verdict["first_bad"]
        out("%s: TAMPERED at line %d: %s" % (args.file, bad["line"], bad["reason"]))
        if verdict["key_error"]:
            out("%s: key problem: %s" % (args.file, verdict["key_error"]))
        return exitcodes.TAMPERED
    if verdict["key_error"]:
        out("%s: KEY PROBLEM: %s (the chain itself is intact, %d lines)" % (args.file, verdict["key_error"],
                                                                            verdict["lines"]))
        return exitcodes.KEY_PROBLEM
    out("%s: intact, %d lines, %s checked, head %s" % (args.file, verdict["lines"], checked, verdict["head"]))
    if verdict["hmac_checked"] and (verdict["unsigned"] or verdict["other_key"]):
        out("%s: accepted without a signature (--allow-unsigned): unsigned %s, another key %s"
            % (args.file, verdict["unsigned"] or "none", verdict["other_key"] or "none"))
    return exitcodes.INTACT


def ask_on_terminal():
    if not sys.stdin.isatty():
        return None
    return input


def main(argv=None, out=None, err=None):
    out = out or (lambda text: print(text, flush=True))
    err = err or (lambda text: print(text, file=sys.stderr, flush=True))
    args = build_parser().parse_args(argv)
    try:
        if args.command == "audit":
            return verify(args, out, err)
        if args.command == "approve":
            return approve_plan(args, out, err)
        if args.command == "apply":
            return plans.apply_plan(args, ask_on_terminal(), out, err)
        if args.command == "plan" and args.out is not None:
            return plans.plan_to_file(args, out, err)
        return RunbookRun(args, ask=ask_on_terminal(), out=out, err=err).execute()
    except (options.UsageError, collection.CollectionNotFound) as error:
        err("gpuops: %s" % error)
        return exitcodes.USAGE
    except approval.ApprovalRefused as refusal:
        err(refusal.message)
        return refusal.exit_code
    except TrailUnwritable as error:
        err("gpuops: %s: nothing more ran (the trail fails closed)" % error)
        return exitcodes.AUDIT_UNWRITABLE
    except KeyboardInterrupt:
        err("gpuops: interrupted before the playbook started")
        return exitcodes.INTERRUPTED
    except Exception as error:  # pylint: disable=broad-exception-caught  # no traceback reaches the user
        if os.environ.get("GPUOPS_DEBUG"):
            traceback.print_exc()
        err("gpuops: internal error: %s: %s (GPUOPS_DEBUG=1 shows the traceback)" % (type(error).__name__, error))
        return exitcodes.ANSIBLE_ERROR


if __name__ == "__main__":
    sys.exit(main())
