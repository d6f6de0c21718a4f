# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: audit
type: aggregate
short_description: Tamper-evident audit trail of a run, one hash-chained JSON line per event
version_added: 0.1.0
description:
  - Appends one JSON line per meaningful event of a run to an append-only file, for review after a production
    run from a bastion. Events are V(run_start) (operator identity including the user behind C(sudo), ticket,
    collection version and git commit, inventory and extra-vars sha256 digests, check or apply mode),
    V(batch_start) (each play batch and its hosts), V(task) (one per host and task, with action, status and duration;
    a C(run_once) task whose result has a C(nodes) mapping, a batch step, also lists those C(nodes)),
    V(gate) (the same for a task that sets the task variable C(gpuops_audit_gate) to the gate's name) and
    V(run_end) (per-host stats).
  - Each line carries C(seq) and C(prev), the sha256 of the previous line (the first line chains to 64 zeros),
    and with O(hmac_key) the key's id C(kid) and an HMAC-SHA256 of the record. C(gpuops audit verify FILE) checks
    the chain, the HMAC and anchors (digests kept outside the operator's reach, such as the O(syslog) copy) and
    names the first bad line.
  - "Nothing secret is written: results of C(no_log) tasks are censored; results are summarised (status, changed,
    rc, and for failures a message cut to 300 characters) and never dumped; of variables only names are recorded,
    and failure messages are scrubbed of the values of environment, extra and host variables whose names look
    secret (password, token, key, secret, ...) and of the host's vault-encrypted values."
  - A task variable C(gpuops_audit_step) (for example V(drain), V(install), V(reboot), V(verify), V(soak)) names the
    timeline lane of the task in the run report; set on a block or an C(include_tasks)/C(include_role), it names
    the lane of every task inside (a gate is only the task that sets C(gpuops_audit_gate) itself).
  - Enable it with C(callbacks_enabled = gpuops.nvidia.audit) in C(ansible.cfg) or
    E(ANSIBLE_CALLBACKS_ENABLED=gpuops.nvidia.audit); the C(gpuops) runner does this for every run.
requirements:
  - A controller on a POSIX system (C(fcntl) locking).
options:
  log_path:
    description:
      - The audit trail file (created with mode 0600, then only appended to).
      - The trail fails closed. It is checked for writing when the playbook starts, and a trail that cannot be
        written then, or any later line that cannot be appended, stops C(ansible-playbook) at once (exit code 99,
        no further task started) with an error naming the file, so that nothing changes unrecorded.
    type: path
    default: ~/.ansible/gpuops-audit.jsonl
    env:
      - name: GPUOPS_AUDIT_LOG
    ini:
      - section: callback_gpuops_audit
        key: log_path
  hmac_key:
    description:
      - Key of the HMAC-SHA256 each line carries. Only from the environment, so that it never sits in a config
        file next to the trail.
    type: str
    env:
      - name: GPUOPS_AUDIT_HMAC_KEY
  ticket:
    description:
      - The change or ticket id of the run. It takes precedence over the extra variable C(gpuops_ticket), which is
        used only when this option is unset (the C(gpuops) runner sets this option and refuses C(-e gpuops_ticket)).
    type: str
    env:
      - name: GPUOPS_TICKET
  run_id:
    description: Id that groups the lines of one run (the C(gpuops) runner sets it); a random one by default.
    type: str
    env:
      - name: GPUOPS_RUN_ID
  syslog:
    description: Also send every line to syslog/journald (tag C(gpuops-audit)).
    type: bool
    default: false
    env:
      - name: GPUOPS_AUDIT_SYSLOG
    ini:
      - section: callback_gpuops_audit
        key: syslog
  syslog_address:
    description: Syslog socket path, or C(host:port) for UDP.
    type: str
    default: /dev/log
    env:
      - name: GPUOPS_AUDIT_SYSLOG_ADDRESS
    ini:
      - section: callback_gpuops_audit
        key: syslog_address
  syslog_facility:
    description: Syslog facility name.
    type: str
    default: authpriv
    env:
      - name: GPUOPS_AUDIT_SYSLOG_FACILITY
    ini:
      - section: callback_gpuops_audit
        key: syslog_facility
"""

import datetime
import os
import pwd
import socket
import sys
import time
import uuid

from ansible import context
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.callback import CallbackBase

from ansible_collections.gpuops.nvidia.plugins.module_utils.audit.chain import append_record, check_writable
from ansible_collections.gpuops.nvidia.plugins.module_utils.audit.events import (
    GATE_VAR, STEP_VAR, TICKET_VAR, collection_info, is_secret_name, operator_identity, secret_values_from_mapping,
    sha256_of_extra_vars, sha256_of_paths, summarise_result,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.audit.forward import SyslogForwarder

# the exit code of a run the broken trail stopped: ansible-playbook's own for a run stopped by an interrupt
STOPPED_RC = 99

try:  # ansible-core 2.19+: EncryptedString or a value tagged VaultedValue
    from ansible.parsing.vault import VaultHelper

    def is_vaulted(value):
        return VaultHelper.get_ciphertext(value, with_tags=False) is not None
except ImportError:  # ansible-core 2.16 - 2.18
    from ansible.parsing.yaml.objects import AnsibleVaultEncryptedUnicode

    def is_vaulted(value):
        return isinstance(value, AnsibleVaultEncryptedUnicode)

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def inherited_vars(task):
    """The task's variables with those of its blocks and includes (a lane set on a block or an include applies to
    every task inside); the task's own when they cannot be read."""
    try:
        return task.get_vars() or {}
    except Exception:  # an object that is not a full playbook Task: keep the task's own vars
        return task.vars or {}


def effective_user():
    """The account the run executes as (from the uid, not from $USER, which anyone can set)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def login_name():
    try:
        return os.getlogin()
    except OSError:
        return os.environ.get("LOGNAME") or None


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuops.nvidia.audit"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None):
        super().__init__(display=display)
        self._log_path = None
        self._hmac_key = None
        self._syslog = None
        self._run_id = None
        self._ticket = None
        self._started = None
        self._play_name = None
        self._batches = {}
        self._batch = 0
        self._task_starts = {}
        self._secrets = set()
        self._run_start_written = False
        self._playbook = None
        self._play = None
        self._host_secrets = {}
        self._broken = None

    def set_options(self, task_keys=None, var_options=None, direct=None):
        super().set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        self._log_path = os.path.expanduser(self.get_option("log_path"))
        key = self.get_option("hmac_key")
        self._hmac_key = to_bytes(key) if key else None
        self._ticket = self.get_option("ticket")
        self._run_id = self.get_option("run_id") or uuid.uuid4().hex
        self._secrets = secret_values_from_mapping(os.environ) | ({key} if key else set())
        if self.get_option("syslog"):
            self._syslog = SyslogForwarder(self.get_option("syslog_address"), self.get_option("syslog_facility"))

    def _stop_the_run(self, error):
        """The trail cannot be written: no change may happen unrecorded, so ansible-playbook ends here (a callback
        exception would only be a warning). Not by an interrupt: ansible-core's cleanup after a KeyboardInterrupt
        can deadlock on its result queue's lock (beside other load, 7 of 24 runs with a broken trail hung, and 4 of
        24 with a real SIGINT), so the process exits at once (0 of 60 hung). A worker still running a task ends
        with it; no later task starts."""
        if self._broken is not None:
            return
        self._broken = str(error)
        self._display.error("gpuops.nvidia.audit: cannot write the audit trail %s (%s): stopping the run, nothing "
                            "more may change unrecorded" % (self._log_path, error), wrap_text=False)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(STOPPED_RC)

    def _write(self, event, **fields):
        if self._broken is not None:
            return
        record = {"event": event, "run_id": self._run_id, "ts": utc_now()}
        record.update(fields)
        try:
            line = append_record(self._log_path, record, self._hmac_key)
        except OSError as error:
            self._stop_the_run(error)
            return
        if self._syslog is not None:
            self._syslog.send(line)

    # run start: written at the first play, when the extra vars (ticket, secret names) are known
    def v2_playbook_on_start(self, playbook):
        self._started = time.monotonic()
        self._playbook = os.path.basename(getattr(playbook, "_file_name", "") or "")
        try:
            check_writable(self._log_path)
        except OSError as error:
            self._stop_the_run(error)

    def _write_run_start(self, play):
        extra_vars = play.get_variable_manager().extra_vars if play.get_variable_manager() else {}
        self._secrets |= secret_values_from_mapping(extra_vars)
        ticket = self._ticket or extra_vars.get(TICKET_VAR)
        arguments = context.CLIARGS
        inventory_sources = list(arguments.get("inventory") or ())
        self._write(
            "run_start",
            playbook=self._playbook,
            operator=operator_identity(os.environ, effective_user(), login_name(), socket.gethostname()),
            ticket=str(ticket) if ticket else None,
            collection=collection_info(COLLECTION_ROOT),
            mode="check" if arguments.get("check") else "apply",
            diff=bool(arguments.get("diff")),
            limit=arguments.get("subset"),
            inventory={"sources": [os.path.abspath(source) if os.path.exists(source) else source
                                   for source in inventory_sources],
                       "sha256": sha256_of_paths(inventory_sources)},
            extra_vars={"names": sorted(str(name) for name in extra_vars),
                        "secret_names": sorted(str(name) for name in extra_vars if is_secret_name(name)),
                        "sha256": sha256_of_extra_vars(arguments.get("extra_vars"))},
        )
        self._run_start_written = True

    def v2_playbook_on_play_start(self, play):
        if not self._run_start_written:
            self._write_run_start(play)
        self._play = play
        self._host_secrets = {}
        self._play_name = play.get_name()
        play_id = play._uuid
        self._batches[play_id] = self._batches.get(play_id, 0) + 1
        self._batch += 1
        hosts = []
        variable_manager = play.get_variable_manager()
        inventory = getattr(variable_manager, "_inventory", None)
        if inventory is not None:
            hosts = [host.name for host in inventory.get_hosts(play.hosts)]
        self._write("batch_start", play=self._play_name, batch=self._batch,
                    play_batch=self._batches[play_id], hosts=hosts)

    def v2_runner_on_start(self, host, task):
        self._task_starts[(host.get_name(), task._uuid)] = (time.time(), utc_now())

    def _task_record(self, kind, result, ignore_errors=False):
        host, task = result._host, result._task
        data = result._result
        started, started_at = self._task_starts.pop((host.get_name(), task._uuid), (None, None))
        task_vars = task.vars or {}
        fields = {
            "play": self._play_name, "batch": self._batch, "host": host.get_name(), "task": task.get_name(),
            "action": task.action, "started": started_at,
            "duration_s": round(time.time() - started, 3) if started is not None else None,
        }
        if task.run_once and isinstance(data.get("nodes"), dict):
            # a batch step acts on every node of its batch from one host's task: the line names them all
            fields["nodes"] = sorted(str(name) for name in data["nodes"])
        step = inherited_vars(task).get(STEP_VAR)
        if step:
            fields["step"] = str(step)
        secrets = self._secrets
        if kind in ("failed", "unreachable") and data.get("msg") and not data.get("censored"):
            host_secrets = self._secrets_of(host, task)
            secrets = None if host_secrets is None else secrets | host_secrets
        fields.update(summarise_result(kind, data, secrets, ignore_errors))
        gate = task_vars.get(GATE_VAR)
        if gate and kind != "skipped":     # a skipped gate was not evaluated: neither passed nor failed
            fields["gate"] = str(gate)
            fields["passed"] = fields["status"] in ("ok", "changed")
            self._write("gate", **fields)
        else:
            self._write("task", **fields)

    def _secrets_of(self, host, task):
        """Values of the host's secret-named and vaulted variables (read only when a failure message is kept)."""
        name = host.get_name()
        if name not in self._host_secrets:
            found = set()
            variable_manager = self._play.get_variable_manager() if self._play is not None else None
            if variable_manager is not None:
                try:
                    found = secret_values_from_mapping(
                        variable_manager.get_vars(play=self._play, host=host, task=task), is_vaulted)
                except Exception as error:  # pylint: disable=broad-exception-caught
                    self._display.warning("gpuops.nvidia.audit: cannot read the variables of %s to scrub a "
                                          "failure message (%s): the message is not recorded" % (name, error))
                    found = None
            self._host_secrets[name] = found
        return self._host_secrets[name]

    def v2_runner_on_ok(self, result):
        self._task_record("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._task_record("failed", result, ignore_errors)

    def v2_runner_on_skipped(self, result):
        self._task_record("skipped", result)

    def v2_runner_on_unreachable(self, result):
        self._task_record("unreachable", result)

    def v2_playbook_on_stats(self, stats):
        hosts = {}
        for host in sorted(stats.processed):
            summary = stats.summarize(host)
            hosts[host] = {name: summary.get(name, 0) for name in
                           ("ok", "changed", "failures", "unreachable", "skipped", "rescued", "ignored")}
        failed = any(counts["failures"] or counts["unreachable"] for counts in hosts.values())
        duration = round(time.monotonic() - self._started, 3) if self._started is not None else None
        fields = {"status": "failed" if failed else "ok", "duration_s": duration, "hosts": hosts}
        if self._syslog is not None:
            fields["syslog_dropped"] = self._syslog.dropped
        self._write("run_end", **fields)
