"""One `gpuops <runbook>` run: refuse what must not run, run the playbook through ansible_runner.interface.run in
its own private_data_dir, then close the audit trail, write the report and rotate old runs."""

from __future__ import annotations

import datetime
import json
import os
import pwd
import secrets
import shutil
import signal
import socket

import yaml

from gpuops_runner import collection, exitcodes, inventory, report, timeline

# subcommand -> (playbook of the collection, apply allowed)
RUNBOOKS = {
    "upgrade": ("driver_upgrade", True),
    "bootstrap": ("node_bootstrap", True),
    "diagnose": ("diagnose", True),
    "plan": ("driver_upgrade", False),
}
# subcommand -> the extra var its playbook acts on as the typed cluster name (gpuops sets it with --apply only)
CONFIRM_VARS = {"upgrade": "gpuops_confirm"}
TARGET_GROUP = "gpu_nodes"
AUDIT_CALLBACK = "gpuops.nvidia.audit"


class Refused(Exception):
    pass


def new_run_id(now=None):
    """UTC time to the millisecond, then random hex: run ids sort by start time, also for runs started within one
    second (rotation keeps the newest by name)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return "%s%03dZ-%s" % (now.strftime("%Y%m%dT%H%M%S."), now.microsecond // 1000, secrets.token_hex(3))


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def extra_vars_mapping(argument):
    """What one -e gives, as ansible-playbook reads it: KEY=VALUE (a string), a JSON/YAML mapping
    (``{"gpuops_upgrade_batches": [1, 1]}``: lists, numbers, booleans) or @FILE (a YAML/JSON file of one)."""
    if argument.startswith("@"):
        try:
            with open(argument[1:], encoding="utf-8") as stream:
                text = stream.read()
        except OSError as error:
            raise Refused("-e %s: cannot read %s: %s" % (argument, argument[1:], error.strerror))
    elif argument.lstrip().startswith("{"):
        text = argument
    else:
        name, sep, value = argument.partition("=")
        if not sep:
            raise Refused("-e %r is not KEY=VALUE, a JSON/YAML mapping or @FILE" % argument)
        return {name: value}
    try:
        mapping = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise Refused("-e %s is not valid JSON/YAML: %s" % (argument[:60], str(error).splitlines()[0]))
    if not isinstance(mapping, dict):
        raise Refused("-e %s is not a mapping of variables" % argument[:60])
    return mapping


def parse_extra_vars(pairs, events):
    """The -e arguments as one dict (later ones win); secrets are refused (they would land in the command line
    and artifacts)."""
    extra_vars = {}
    for argument in pairs or ():
        for name, value in extra_vars_mapping(argument).items():
            if not isinstance(name, str) or not name.isidentifier():
                raise Refused("-e %r: %r is not a variable name" % (argument[:60], name))
            if events.is_secret_name(name):
                raise Refused("-e %s looks like a secret: pass secrets through ansible-vault or the environment, "
                              "never on the command line" % name)
            extra_vars[name] = value
    return extra_vars


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
    }
    if ticket:
        env["GPUOPS_TICKET"] = ticket
    return env


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
    """State of one run; ``execute()`` returns the exit code."""

    def __init__(self, args, ask=None, out=print):
        self.args = args
        self.ask = ask
        self.out = out
        self.run_id = new_run_id()
        self.data_dir = os.path.abspath(os.path.expanduser(args.data_dir))
        self.run_dir = os.path.join(self.data_dir, "runs", self.run_id)
        default_log = os.path.join(self.data_dir, "audit.jsonl")
        self.audit_log = os.path.abspath(os.path.expanduser(args.audit_log or default_log))
        self.playbook, self.apply_allowed = RUNBOOKS[args.runbook]
        self.collections_path = collection.find_collections_path(args.collections_path)
        self.chain = collection.chain(self.collections_path)
        self.events = collection.events(self.collections_path)
        key = os.environ.get(self.events.HMAC_KEY_ENV)
        self.hmac_key = key.encode("utf-8") if key else None
        self.cluster = None
        self.interrupted = False

    @property
    def mode(self):
        return "apply" if self.args.apply else "check"

    def _append(self, event, **fields):
        record = {"event": event, "run_id": self.run_id, "ts": utc_now(), "runbook": self.args.runbook,
                  "playbook": "gpuops.nvidia." + self.playbook, "mode": self.mode}
        record.update(fields)
        self.chain.append_record(self.audit_log, record, self.hmac_key)

    def _check(self, env):
        extra_vars = parse_extra_vars(self.args.extra_vars, self.events)
        confirm_var = CONFIRM_VARS.get(self.args.runbook)
        if confirm_var in extra_vars:
            raise Refused("-e %s: gpuops sets it, from --apply and the cluster name typed (--confirm)" % confirm_var)
        if self.args.apply and not self.apply_allowed:
            raise Refused("gpuops %s is a dry run by definition: use gpuops upgrade --apply" % self.args.runbook)
        if self.args.apply and not (self.args.ticket or "").strip():
            raise Refused("--apply needs --ticket ID (the change or incident the run belongs to)")
        playbook_file = os.path.join(collection.collection_root(self.collections_path), "playbooks",
                                     self.playbook + ".yml")
        if not os.path.isfile(playbook_file):
            raise Refused("gpuops.nvidia.%s is not in the collection at %s (not released yet?)"
                          % (self.playbook, collection.collection_root(self.collections_path)))
        if not os.path.exists(self.args.inventory):
            raise Refused("inventory %s does not exist" % self.args.inventory)
        try:
            listing = inventory.read_inventory(self.args.inventory, dict(os.environ, **env),
                                               self.args.vault_password_file)
        except inventory.InventoryError as error:
            raise Refused(str(error))
        hosts = inventory.group_hosts(listing, TARGET_GROUP) or inventory.group_hosts(listing, "all")
        names = inventory.cluster_names(listing, hosts)
        self.cluster = names[0] if len(names) == 1 else None
        if self.args.apply:
            if len(names) != 1 or names[0] is None:
                raise Refused("--apply needs every target host to carry one %s; found %s"
                              % (inventory.CLUSTER_VAR, names))
            confirm_cluster(self.cluster, self.args.confirm, self.ask)
            if confirm_var:
                extra_vars[confirm_var] = self.cluster
        return extra_vars

    def _on_signal(self, signum, frame):
        self.interrupted = True

    def execute(self):
        os.makedirs(self.run_dir, mode=0o700)
        env = ansible_env(self.collections_path, self.audit_log, self.run_id, self.args.ticket)
        try:
            extra_vars = self._check(env)
        except Refused as refusal:
            self._append("refused", reason=str(refusal), exit_code=exitcodes.REFUSED, ticket=self.args.ticket,
                         operator=operator(self.events), cluster=self.cluster,
                         collection=self.events.collection_info(collection.collection_root(self.collections_path)))
            return self._finish(exitcodes.REFUSED)
        return self._run(env, extra_vars)

    def _run(self, env, extra_vars):
        import ansible_runner

        cmdline = [] if self.args.apply else ["--check"]
        if self.args.diff:
            cmdline.append("--diff")
        if self.args.vault_password_file:
            cmdline += ["--vault-password-file", os.path.abspath(self.args.vault_password_file)]
        artifact_dir = os.path.join(self.run_dir, "artifacts", self.run_id)
        scrubbed, kept_events = [], []
        env_secrets = self.events.secret_values_from_mapping(os.environ)

        def on_event(event):
            if not scrubbed:  # the command file exists once events flow: shorten the time it holds the env
                scrub_command_artifact(artifact_dir, env)
                scrubbed.append(True)
            kept_events.append(censor_event(event, env_secrets))
            return True

        previous = {signum: signal.signal(signum, self._on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            result = ansible_runner.interface.run(
                private_data_dir=self.run_dir, ident=self.run_id,
                project_dir=os.path.join(collection.collection_root(self.collections_path), "playbooks"),
                playbook="gpuops.nvidia." + self.playbook, inventory=os.path.abspath(self.args.inventory),
                limit=self.args.limit, extravars=extra_vars, cmdline=" ".join(cmdline) or None, envvars=env,
                suppress_env_files=True, settings={"suppress_output_file": True}, quiet=not self.args.verbose,
                event_handler=on_event,
                cancel_callback=lambda: self.interrupted)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        scrub_command_artifact(artifact_dir, env)
        write_stdout_from_events(artifact_dir, kept_events)
        records = self.chain.read_records(self.audit_log, self.run_id)
        code = outcome_of(records, result.status, result.rc, self.interrupted)
        self._append("runner_end", exit_code=code, outcome=exitcodes.MEANING[code], runner_status=result.status,
                     runner_rc=result.rc, cluster=self.cluster, artifacts=artifact_dir)
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
