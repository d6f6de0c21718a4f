# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one way this collection runs a command on a host (private to it).

Argument lists only, never a shell string; always through AnsibleModule.run_command; LC_ALL=C and LANG=C so the
parsers read the C locale's output whatever the host's; a time limit on every command. AnsibleModule.run_command
has no time limit of its own, so the command runs under coreutils timeout(1) when that is installed (exit status
124 when it had to stop it); without it the command runs unbounded, as the modules' timeout options document.
"""

from __future__ import annotations

import os

C_LOCALE = {"LC_ALL": "C", "LANG": "C"}
TIMEOUT_EXIT_CODE = 124  # coreutils timeout(1) when it stopped the command


class CommandResult:
    """What one command did: argv as asked (without the timeout(1) wrapper), rc, stdout, stderr, timed_out."""

    def __init__(self, argv, rc, stdout, stderr, timed_out, timeout):
        self.argv = list(argv)
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out
        self.timeout = timeout

    @property
    def ok(self):
        return self.rc == 0 and not self.timed_out

    @property
    def name(self):
        """The program's file name, as messages name it."""
        return os.path.basename(self.argv[0])

    def first_error_line(self):
        """The first line of stderr (else stdout), or 'no output'."""
        lines = (self.stderr or self.stdout).strip().splitlines()
        return lines[0] if lines else "no output"

    def __repr__(self):
        return "CommandResult(argv=%r, rc=%r, timed_out=%r)" % (self.argv, self.rc, self.timed_out)


class CommandRunner:
    """Runs argument lists for one module, each under a time limit (seconds; a call may give its own)."""

    def __init__(self, module, timeout):
        self.module = module
        self.timeout = timeout
        self._timeout_program = module.get_bin_path("timeout")

    def find(self, name, required=False):
        """The program's path (PATH and the sbin directories), or None; required=True fails the module instead."""
        return self.module.get_bin_path(name, required=required)

    def run(self, argv, timeout=None, data=None, cwd=None):
        """Run argv (a list; argv[0] a path or a name on PATH) and return its CommandResult."""
        if isinstance(argv, (str, bytes)):
            raise TypeError("CommandRunner.run takes an argument list, not a string: %r" % (argv,))
        limit = self.timeout if timeout is None else timeout
        wrapped = list(argv)
        if self._timeout_program:
            wrapped = [self._timeout_program, str(limit)] + wrapped
        rc, stdout, stderr = self.module.run_command(wrapped, data=data, cwd=cwd, environ_update=dict(C_LOCALE),
                                                     check_rc=False)
        timed_out = bool(self._timeout_program) and rc == TIMEOUT_EXIT_CODE
        return CommandResult(argv, rc, stdout, stderr, timed_out, limit)

    def run_or_fail(self, argv, what=None, data=None):
        """Run argv and fail the module unless it succeeded: '<what> failed (rc N): <stderr or stdout>'."""
        result = self.run(argv, data=data)
        if result.rc != 0:
            self.module.fail_json(msg="%s failed (rc %d): %s" % (what or result.name, result.rc,
                                                                 (result.stderr or result.stdout).strip()))
        return result
