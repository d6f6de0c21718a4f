"""gpuops: the command line (see docs/runner.md)."""

from __future__ import annotations

import argparse
import os
import sys

from gpuops_runner import collection, exitcodes
from gpuops_runner.runbook import RUNBOOKS, RunbookRun

DEFAULT_DATA_DIR = os.environ.get("GPUOPS_DATA_DIR", "~/.local/share/gpuops")
DEFAULT_KEEP_RUNS = 50


def build_parser():
    parser = argparse.ArgumentParser(
        prog="gpuops", description="Run the gpuops.nvidia runbooks with an audit trail (dry run unless --apply).",
        epilog="exit codes: 0 done, 2 usage, 3 refused, 4 gate failed, 5 node failed, 6 interrupted, "
               "7 ansible error; audit verify: 0 intact, 1 tampered, 2 unreadable")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in RUNBOOKS:
        sub = commands.add_parser(name, help="run gpuops.nvidia.%s" % RUNBOOKS[name][0])
        sub.set_defaults(runbook=name)
        sub.add_argument("-i", "--inventory", required=True, help="inventory file or directory")
        sub.add_argument("-e", "--extra-var", dest="extra_vars", action="append", default=[], metavar="KEY=VALUE",
                         help="extra variables as ansible-playbook reads them: KEY=VALUE (a string), a JSON/YAML "
                              "mapping or @FILE (repeatable; names that look secret are refused)")
        sub.add_argument("--apply", action="store_true", help="change the nodes (default: --check dry run)")
        sub.add_argument("--ticket", help="change/incident id, required with --apply, recorded in the audit trail")
        sub.add_argument("--confirm", metavar="CLUSTER", help="the cluster name typed (else asked on the terminal)")
        sub.add_argument("--limit", help="ansible --limit pattern")
        sub.add_argument("--diff", action="store_true", help="ansible --diff")
        sub.add_argument("--vault-password-file", help="passed to ansible by path (its content is never copied)")
        sub.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="runs/ and audit.jsonl live here "
                                                                      "(default %(default)s, $GPUOPS_DATA_DIR)")
        sub.add_argument("--audit-log", help="audit trail file (default DATA_DIR/audit.jsonl)")
        sub.add_argument("--keep-runs", type=int, default=DEFAULT_KEEP_RUNS,
                         help="run folders kept under DATA_DIR/runs (default %(default)s)")
        sub.add_argument("--collections-path", help="folder holding ansible_collections/gpuops/nvidia "
                                                    "(default: $ANSIBLE_COLLECTIONS_PATH, then ansible's defaults)")
        sub.add_argument("-v", "--verbose", action="store_true", help="show ansible's output")
    audit = commands.add_parser("audit", help="audit trail tools").add_subparsers(dest="audit_command", required=True)
    verify = audit.add_parser("verify", help="check the hash chain (and HMAC with $GPUOPS_AUDIT_HMAC_KEY)")
    verify.add_argument("file")
    verify.add_argument("--head", help="expected sha256 of the last line (from a run summary or syslog)")
    verify.add_argument("--collections-path")
    return parser


def verify(args):
    chain = collection.chain(collection.find_collections_path(args.collections_path))
    key = os.environ.get("GPUOPS_AUDIT_HMAC_KEY")
    try:
        verdict = chain.verify_file(args.file, key.encode("utf-8") if key else None, args.head)
    except OSError as error:
        print("gpuops audit verify: cannot read %s: %s" % (args.file, error), file=sys.stderr)
        return exitcodes.USAGE
    checked = "hash chain and HMAC" if verdict["hmac_checked"] else "hash chain (no HMAC key given)"
    if verdict["ok"]:
        print("%s: intact, %d lines, %s checked, head %s" % (args.file, verdict["lines"], checked, verdict["head"]))
        return exitcodes.DONE
    bad = verdict["first_bad"]
    print("%s: TAMPERED at line %d: %s" % (args.file, bad["line"], bad["reason"]))
    return exitcodes.TAMPERED


def ask_on_terminal():
    if not sys.stdin.isatty():
        return None
    return input


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        if args.command == "audit":
            return verify(args)
        return RunbookRun(args, ask=ask_on_terminal()).execute()
    except collection.CollectionNotFound as error:
        print("gpuops: %s" % error, file=sys.stderr)
        return exitcodes.USAGE


if __name__ == "__main__":
    sys.exit(main())
