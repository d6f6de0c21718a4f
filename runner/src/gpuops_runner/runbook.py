"""One `gpuops <runbook>` run: refuse what must not run, run the playbook through ansible_runner.interface.run in
its own private_data_dir (owning its process), then close the audit trail, write the report and rotate old runs."""

from __future__ import annotations

import collections
import datetime
import json
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import sys

from gpuops_runner import (collection, controller, exitcodes, extravars, inventory, options, process,
                           progress, repairs, report, timeline)

# fixed_vars: extra vars the subcommand sets (-e cannot); repairs: it needs --limit and its trail names the repairs
Runbook = collections.namedtuple("Runbook", "playbook apply_allowed summary fixed_vars repairs", defaults=((), False))
RUNBOOKS = {
    "upgrade": Runbook("driver_upgrade", True,
                       "roll a driver version across the GPU nodes: canary, then batches, each node drained, "
                       "installed, rebooted and verified (dry run: the plan; --apply changes the nodes)"),
    "bootstrap": Runbook("node_bootstrap", True,
                         "turn bare GPU nodes into schedulable GPU nodes: precheck, driver, container runtime, "
                         "device plugin, verify (dry run unless --apply)"),
    "diagnose": Runbook("diagnose", True,
                        "diagnose GPU nodes layer by layer (L0 hardware to L6 pods) and name the failing layer "
                        "and its fix (read-only unless the runbook's remediation is asked for)"),
    "repair": Runbook("diagnose", True,
                      "diagnose the nodes named with --limit and apply the runbook's safe repairs, each verified "
                      "(dry run: what would be repaired, per node and case; --apply repairs)",
                      (("gpuops_remediate", True),), True),
    "plan": Runbook("driver_upgrade", False,
                    "print a change's plan by batch (the driver upgrade's, or a change kind's of the change engine), "
                    "never changing anything (always --check, never --apply)"),
    "change": Runbook("change", True,
                      "make a change of one change kind (node labels, device plugin or containerd configuration, "
                      "...) across the GPU nodes: canary, then batches, each node applied and verified (dry run: "
                      "the plan; --apply changes the nodes)"),
}
# the change engine (docs/change_engine.md): one runbook for every change kind of the collection's kinds table,
# told which one by this variable (set by gpuops from CHANGE_KIND, never with -e)
ENGINE_PLAYBOOK = "change"
CHANGE_KIND_VAR = "gpuops_change_kind"
# the sha256 of the plan gpuops apply checked: without it the engine's runbook refuses to change the cluster where the
# kind's policy asks for a second operator (its own guard when run by hand)
APPROVED_PLAN_VAR = "gpuops_approved_plan"
UPGRADE_KIND = "driver_upgrade"
# the extra var the runbooks check every host's gpuops_cluster_name against (gpuops sets it with --apply only)
CONFIRM_VAR = "gpuops_confirm"
AUDIT_CALLBACK = "gpuops.nvidia.audit"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TRUE_WORDS = ("1", "true", "yes", "on")


class Refused(Exception):
    pass


def runbook_for(args):
    """The runbook a command runs and the change kind it acts on (None for runbooks that are no change kind:
    bootstrap, diagnose, repair). `gpuops plan KIND` plans a change-engine kind with the engine's runbook."""
    runbook = RUNBOOKS[args.runbook]
    kind = getattr(args, "change", None)
    if runbook.playbook == UPGRADE_KIND:                    # upgrade, and plan without a kind
        kind = kind or UPGRADE_KIND
        if kind != UPGRADE_KIND:
            runbook = runbook._replace(playbook=ENGINE_PLAYBOOK)
    elif runbook.playbook != ENGINE_PLAYBOOK:
        kind = None
    if runbook.playbook == ENGINE_PLAYBOOK:
        runbook = runbook._replace(fixed_vars=tuple(runbook.fixed_vars) + ((CHANGE_KIND_VAR, kind),))
    return runbook, kind


class TrailUnwritable(Exception):
    pass


def new_run_id(now=None):
    """UTC time to the millisecond, then random hex: run ids sort by start time, also for runs started within one
    second (rotation keeps the newest by name)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return "%s%03dZ-%s" % (now.strftime("%Y%m%dT%H%M%S."), now.microsecond // 1000, secrets.token_hex(3))


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def operator(events):
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = str(os.geteuid())
    try:
        login = os.getlogin()
    except OSError:
        login = os.environ.get("LOGNAME")
    return events.operator_identity(os.environ, user, login, socket.gethostname())


def ansible_env(collections_path, audit_log, run_id, ticket):
    """The variables the run gets on top of the inherited environment (none of them secret)."""
    enabled = [name for name in os.environ.get("ANSIBLE_CALLBACKS_ENABLED", "").split(",") if name.strip()]
    env = {
        "ANSIBLE_COLLECTIONS_PATH": collections_path,
        "ANSIBLE_CALLBACKS_ENABLED": ",".join(enabled + ([AUDIT_CALLBACK] if AUDIT_CALLBACK not in enabled else [])),
        "GPUOPS_AUDIT_LOG": audit_log,
        "GPUOPS_RUN_ID": run_id,
        "GPUOPS_TICKET": ticket or "",   # never one inherited from the operator's environment
    }
    return env


def syslog_forwarder(forward, environ):
    """The runner's own lines go where the callback sends its lines (same environment options): the syslog copy
    then ends with the run's last line, the anchor of the trail's head."""
    if str(environ.get("GPUOPS_AUDIT_SYSLOG", "")).strip().lower() not in TRUE_WORDS:
        return None
    try:
        return forward.SyslogForwarder(environ.get("GPUOPS_AUDIT_SYSLOG_ADDRESS") or forward.DEFAULT_ADDRESS,
                                       environ.get("GPUOPS_AUDIT_SYSLOG_FACILITY") or forward.DEFAULT_FACILITY)
    except (OSError, ValueError):
        return None


def scrub_command_artifact(artifact_dir, our_env):
    """ansible-runner writes artifacts/<id>/command with the whole inherited environment (tokens, the HMAC key):
    keep the values we set, replace every other value by a marker."""
    path = os.path.join(artifact_dir, "command")
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as stream:
        data = json.load(stream)
    data["env"] = {name: (our_env[name] if name in our_env else "(inherited, not recorded)")
                   for name in sorted(data.get("env") or {})}
    temporary = path + ".tmp"
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as stream:
        json.dump(data, stream)
    os.replace(temporary, path)


NO_LOG_STDOUT = "(output of a no_log task hidden by gpuops)\r\n"


def censor_event(event, secrets):
    """Make a runner event safe to keep: ansible-core 2.19 prints the failure message of a no_log task (the
    captured exception) although the result itself is censored, so the stdout of a censored result is replaced;
    every value of a secret-named environment variable is scrubbed from the whole event."""
    data = event.get("event_data") or {}
    if isinstance(data.get("res"), dict) and data["res"].get("censored"):
        event["stdout"] = NO_LOG_STDOUT
    if secrets:
        text = json.dumps(event)
        scrubbed = scrub(text, secrets)
        if scrubbed != text:
            event.clear()
            event.update(json.loads(scrubbed))
    return event


def scrub(text, secrets):
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(json.dumps(secret)[1:-1], "********")
    return text


def write_stdout_from_events(artifact_dir, events):
    """The artifact's stdout rebuilt from the censored events (ansible-runner's raw copy is not written)."""
    path = os.path.join(artifact_dir, "stdout")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as stream:
        for event in sorted(events, key=lambda one: one.get("counter", 0)):
            stream.write(event.get("stdout") or "")
            if event.get("stdout"):
                stream.write("\n")


def rotate_runs(runs_dir, keep):
    """Keep the newest ``keep`` run folders (run ids sort by time)."""
    runs = sorted(name for name in os.listdir(runs_dir) if os.path.isdir(os.path.join(runs_dir, name)))
    for name in runs[:-keep] if keep > 0 else []:
        shutil.rmtree(os.path.join(runs_dir, name), ignore_errors=True)


INPUT_GATE = "inputs"


def confirm_cluster(cluster, confirm, ask):
    if confirm is None:
        if ask is None:
            raise Refused("--apply needs the cluster name typed: pass --confirm %s (no terminal to ask on)" % cluster)
        confirm = ask("Type the name of the cluster to change (%s): " % cluster).strip()
    if confirm != cluster:
        raise Refused("confirmation %r does not match the inventory's cluster %r" % (confirm, cluster))


def outcome_of(records, runner_status, runner_rc, interrupted):
    if interrupted or runner_status in ("canceled", "timeout"):
        return exitcodes.INTERRUPTED
    steps = [record for record in records if record.get("event") in ("task", "gate") and not record.get("ignored")]
    # a runbook refuses its inputs before anything changes with a failed gate of this name
    if any(step["event"] == "gate" and step.get("gate") == INPUT_GATE and step["status"] == "failed" for step in steps):
        return exitcodes.REFUSED
    if any(step["event"] == "gate" and step["status"] in ("failed", "unreachable") for step in steps):
        return exitcodes.GATE_FAILED
    if any(step["status"] in ("failed", "unreachable") for step in steps):
        return exitcodes.NODE_FAILED
    if runner_status != "successful" or runner_rc != 0:
        return exitcodes.ANSIBLE_ERROR
    return exitcodes.DONE


class RunbookRun:
    """One run. The constructor checks the command line (options.UsageError, nothing written); ``execute()``
    returns the exit code."""

    def __init__(self, args, ask=None, out=print, err=None):
        self.args = args
        self.ask = ask
        self.out = out
        self.err = err or (lambda text: None)
        self.runbook, self.change_kind = runbook_for(args)
        self.run_id = new_run_id()
        self.inventory = options.text("-i/--inventory", args.inventory)
        self.ticket = options.ticket(args.ticket) if args.ticket is not None else None
        self.confirm = options.cluster_name("--confirm", args.confirm) if args.confirm is not None else None
        self.limit = options.text("--limit", args.limit) if args.limit is not None else None
        self.vault_password_file = (options.existing_file("--vault-password-file", args.vault_password_file)
                                    if args.vault_password_file is not None else None)
        self.data_dir = options.directory_to_create("--data-dir", args.data_dir)
        self.audit_log = options.trail_file("--audit-log", args.audit_log) if args.audit_log is not None else \
            os.path.join(self.data_dir, "audit.jsonl")
        explicit = (options.existing_directory("--collections-path", args.collections_path)
                    if args.collections_path is not None else None)
        self.collections_path = collection.find_collections_path(explicit)
        self.chain, self.events, forward = collection.audit_api(self.collections_path)
        # the change engine's kinds: which CHANGE_KIND it knows, and each kind's default of the two-person rule
        self.engine_kinds = collection.change_kinds(self.collections_path) if self.change_kind else {}
        if self.runbook.playbook == ENGINE_PLAYBOOK and self.change_kind not in self.engine_kinds:
            raise options.UsageError("CHANGE_KIND", "%r is not a change kind of gpuops.nvidia at %s (%s)" % (
                self.change_kind, collection.collection_root(self.collections_path),
                ", ".join(sorted(set(self.engine_kinds) | {UPGRADE_KIND}))))
        self.forwarder = syslog_forwarder(forward, os.environ)
        self.run_dir = os.path.join(self.data_dir, "runs", self.run_id)
        key = os.environ.get(self.events.HMAC_KEY_ENV)
        self.hmac_key = key.encode("utf-8") if key else None
        self.cluster = None
        self.controller = None
        self.interrupted = None
        # the plan files (plans.py): the result of this module's task is kept, and these fields go to runner_start
        self.capture_action = None
        self.captured = None
        self.start_fields = {}
        self.extra_vars = {}
        self.from_plan = None   # gpuops apply PLAN: the plan's sha256, its two-person rule checked before this run
        self.after_run = None   # called with the exit code before runner_end; returns the code and its fields

    @property
    def mode(self):
        return "apply" if self.args.apply else "check"

    def record(self, event, **fields):
        """One line of this run in the audit trail (TrailUnwritable when it cannot be written)."""
        self._append(event, **fields)

    def _append(self, event, **fields):
        record = {"event": event, "run_id": self.run_id, "ts": utc_now(), "runbook": self.args.runbook,
                  "playbook": "gpuops.nvidia." + self.runbook.playbook, "mode": self.mode}
        record.update(fields)
        try:
            line = self.chain.append_record(self.audit_log, record, self.hmac_key)
        except OSError as error:
            raise TrailUnwritable("--audit-log: %s cannot be written (%s)" % (self.audit_log, error.strerror or error))
        if self.forwarder is not None:
            self.forwarder.send(line)

    def _prepare_trail(self):
        """The data dir and a writable trail, before anything runs (the trail fails closed)."""
        try:
            os.makedirs(self.data_dir, mode=0o700, exist_ok=True)
        except OSError as error:
            raise options.UsageError("--data-dir", "%s cannot be created (%s)" % (self.data_dir, error.strerror))
        if os.path.dirname(self.audit_log) == self.data_dir and os.path.isdir(self.audit_log):
            raise TrailUnwritable("--audit-log: %s is a directory" % self.audit_log)
        try:
            self.chain.check_writable(self.audit_log)
        except OSError as error:
            raise TrailUnwritable("--audit-log: %s cannot be written (%s)" % (self.audit_log, error.strerror or error))
        try:
            os.makedirs(self.run_dir, mode=0o700)
        except OSError as error:
            raise options.UsageError("--data-dir", "%s cannot be created (%s)" % (self.run_dir, error.strerror))

    def _check(self, env):
        """The extra vars to run with; Refused when the run must not start."""
        if self.runbook.repairs and (self.limit is None or self.limit.strip() in ("all", "*")):
            raise Refused("gpuops %s names its nodes: pass --limit NODES (there is no fleet-wide repair)"
                          % self.args.runbook)
        try:
            extra_vars = extravars.parse(self.args.extra_vars, self.events.is_secret_name)
        except extravars.ExtraVarsRefused as refusal:
            raise Refused(str(refusal))
        self.extra_vars = dict(extra_vars)   # the run's inputs as given (before gpuops adds its own)
        for name, value in self.runbook.fixed_vars:
            if name in extra_vars:
                raise Refused("-e %s is set by gpuops %s" % (name, self.args.runbook))
            extra_vars[name] = value
        if self.args.apply and not self.runbook.apply_allowed:
            raise Refused("gpuops %s is a dry run by definition: use gpuops upgrade --apply" % self.args.runbook)
        if self.args.apply and not self.ticket:
            raise Refused("--apply needs --ticket ID (the change or incident the run belongs to)")
        playbook_file = os.path.join(collection.collection_root(self.collections_path), "playbooks",
                                     self.runbook.playbook + ".yml")
        if not os.path.isfile(playbook_file):
            raise Refused("gpuops.nvidia.%s is not in the collection at %s (not released yet?)"
                          % (self.runbook.playbook, collection.collection_root(self.collections_path)))
        try:
            listing = inventory.read_inventory(self.inventory, dict(os.environ, **env), self.vault_password_file)
        except inventory.InventoryError as error:
            raise Refused("-i/--inventory: %s" % error)
        if self.args.apply and not self.from_plan and self.change_kind is not None:
            try:
                policy = inventory.approval_policy(listing, self.change_kind, self.engine_kinds)
            except inventory.InventoryError as error:
                raise Refused("-i/--inventory: %s" % error)
            if policy["require_approval"]:
                raise Refused("%s: %s needs the approval of a second operator: gpuops plan %s --out PLAN, gpuops "
                              "approve PLAN, gpuops apply PLAN (docs/operations.md)"
                              % (inventory.POLICY_VAR, self.change_kind, self.change_kind))
        spec = os.path.join(collection.collection_root(self.collections_path), "playbooks", "specs",
                            self.runbook.playbook + ".yml")
        self.controller = controller.settings(len(inventory.nodes(listing)), spec, extra_vars,
                                              forks_cap=self.args.forks_cap)
        env.update(self.controller.env)
        try:
            self.cluster = inventory.the_cluster(listing)
        except inventory.InventoryError as error:
            if self.args.apply:
                raise Refused("--apply: %s" % error)
        if self.args.apply:
            confirm_cluster(self.cluster, self.confirm, self.ask)
            extra_vars[CONFIRM_VAR] = self.cluster
            if self.from_plan and self.runbook.playbook == ENGINE_PLAYBOOK:
                extra_vars[APPROVED_PLAN_VAR] = self.from_plan
        return extra_vars

    def _on_signal(self, signum, frame):
        self.interrupted = signal.Signals(signum).name

    def execute(self):
        env = ansible_env(self.collections_path, self.audit_log, self.run_id, self.ticket)
        self._prepare_trail()
        try:
            return self._refuse_or_run(env)
        except TrailUnwritable:
            if not os.listdir(self.run_dir):
                os.rmdir(self.run_dir)
            raise

    def _refuse_or_run(self, env):
        about = {"ticket": self.ticket, "operator": operator(self.events),
                 "collection": self.events.collection_info(collection.collection_root(self.collections_path))}
        try:
            extra_vars = self._check(env)
        except Refused as refusal:
            self.err("gpuops: refused: %s" % refusal)
            self._append("refused", reason=str(refusal), exit_code=exitcodes.REFUSED, cluster=self.cluster, **about)
            return self._finish(exitcodes.REFUSED)
        # the first line of the run, written before the playbook starts: proves the trail takes lines
        self._append("runner_start", cluster=self.cluster, limit=self.limit, extra_vars=sorted(extra_vars),
                     controller=self.controller.as_record(), **dict(about, **self.start_fields))
        if not self.args.quiet:
            self.err("gpuops: %s" % self.controller.line())
        return self._run(env, extra_vars)

    def _playbook_arguments(self):
        arguments = [] if self.args.apply else ["--check"]
        if self.args.diff:
            arguments.append("--diff")
        if self.vault_password_file:
            arguments += ["--vault-password-file", self.vault_password_file]
        return arguments

    def _run(self, env, extra_vars):
        import ansible_runner

        artifact_dir = os.path.join(self.run_dir, "artifacts", self.run_id)
        scrubbed, kept_events = [], []
        env_secrets = self.events.secret_values_from_mapping(os.environ)
        if self.hmac_key:
            env_secrets.add(self.hmac_key.decode("utf-8"))

        def on_event(event):
            if not scrubbed:  # the command file exists once events flow: shorten the time it holds the env
                scrub_command_artifact(artifact_dir, env)
                scrubbed.append(True)
            kept = censor_event(event, env_secrets)
            kept_events.append(kept)
            data = kept.get("event_data") or {}
            if (self.capture_action and kept.get("event") == "runner_on_ok"
                    and data.get("task_action") == self.capture_action):
                self.captured = data.get("res")
            if not self.args.quiet:
                line = progress.line_for(kept)
                if line:    # on stderr: stdout holds the summary alone, for whoever reads or pipes it
                    print(line, file=sys.stderr, flush=True)
            return True

        source = os.path.abspath(self.inventory) if os.path.exists(self.inventory) else self.inventory
        process.become_subreaper()
        before = set(process.child_pids())
        previous = {signum: signal.signal(signum, self._on_signal) for signum in STOP_SIGNALS}
        try:
            result = ansible_runner.interface.run(
                private_data_dir=self.run_dir, ident=self.run_id,
                project_dir=os.path.join(collection.collection_root(self.collections_path), "playbooks"),
                playbook="gpuops.nvidia." + self.runbook.playbook, inventory=source,
                limit=self.limit, extravars=extra_vars, cmdline=shlex.join(self._playbook_arguments()) or None,
                envvars=env, suppress_env_files=True, settings={"suppress_output_file": True},
                quiet=not self.args.verbose, event_handler=on_event,
                cancel_callback=lambda: self.interrupted is not None)
        except BaseException as failure:  # pylint: disable=broad-exception-caught  # the playbook must not outlive us
            stopped = process.stop_new_children(before)
            reason = "the runner failed (%s: %s)" % (type(failure).__name__, failure)
            self.err("gpuops: %s; the playbook was %s" % (reason, "stopped" if stopped else "not running"))
            self._append("runner_end", exit_code=exitcodes.INTERRUPTED, outcome=exitcodes.MEANING[exitcodes.INTERRUPTED],
                         reason=reason, playbook_stopped=bool(stopped), cluster=self.cluster, artifacts=artifact_dir)
            return self._finish(exitcodes.INTERRUPTED)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        # what a killed playbook left behind (its detached workers, reparented to us)
        process.stop_new_children(before)
        scrub_command_artifact(artifact_dir, env)
        write_stdout_from_events(artifact_dir, kept_events)
        records = self.chain.read_records(self.audit_log, self.run_id)
        code = outcome_of(records, result.status, result.rc, self.interrupted is not None)
        fields = {}
        if self.interrupted:
            fields = {"reason": "stopped by %s" % self.interrupted, "playbook_stopped": True}
            self.err("gpuops: interrupted by %s: the playbook was stopped" % self.interrupted)
        if self.after_run is not None and code == exitcodes.DONE:
            code, more = self.after_run(code)
            fields.update(more)
        if self.runbook.repairs:
            fields["repairs"] = repairs.collect(kept_events)
        self._append("runner_end", exit_code=code, outcome=exitcodes.MEANING[code], runner_status=result.status,
                     runner_rc=result.rc, cluster=self.cluster, artifacts=artifact_dir, **fields)
        return self._finish(code)

    def _finish(self, code):
        records = self.chain.read_records(self.audit_log, self.run_id)
        lines = self.chain.read_lines(self.audit_log)
        head = self.chain.line_digest(lines[-1]) if lines else self.chain.GENESIS
        with open(os.path.join(self.run_dir, "report.html"), "w", encoding="utf-8") as stream:
            stream.write(report.html_page(records, head))
        with open(os.path.join(self.run_dir, "timeline.svg"), "w", encoding="utf-8") as stream:
            stream.write(timeline.svg_document(report.steps(records)))
        summary = report.summary_text(records, self.run_dir, self.audit_log, head)
        with open(os.path.join(self.run_dir, "summary.txt"), "w", encoding="utf-8") as stream:
            stream.write(summary + "\n")
        with open(os.path.join(self.run_dir, "audit-head"), "w", encoding="utf-8") as stream:
            stream.write(head + "\n")
        self.out(summary)
        rotate_runs(os.path.dirname(self.run_dir), self.args.keep_runs)
        return code
