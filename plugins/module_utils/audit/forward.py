# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Forwarding trail lines to syslog/journald: the copy of the trail the operator cannot rewrite, whose lines are
the anchors ``chain.verify_lines`` checks the file against (``chain.anchors_from_text`` reads an export of it).

Public and versioned with ``chain.API_VERSION`` (docs/audit.md). Used by the ``gpuops.nvidia.audit`` callback for
its lines and by the ``gpuops`` runner for its own (``refused``, ``runner_end``).
"""

from __future__ import annotations

import socket

TAG = "gpuops-audit"
FACILITIES = {"kern": 0, "user": 1, "daemon": 3, "auth": 4, "syslog": 5, "authpriv": 10, "local0": 16,
              "local1": 17, "local2": 18, "local3": 19, "local4": 20, "local5": 21, "local6": 22, "local7": 23}
INFO = 6
DEFAULT_ADDRESS = "/dev/log"
DEFAULT_FACILITY = "authpriv"


class SyslogForwarder:
    """Sends each line to syslog/journald as one datagram, never blocking the run: a full, absent or refusing
    socket drops the line (the file holds every line; the callback counts drops in its run_end record)."""

    def __init__(self, address=DEFAULT_ADDRESS, facility=DEFAULT_FACILITY):
        self.priority = FACILITIES.get(facility, 1) * 8 + INFO
        if ":" in address and not address.startswith("/"):
            host, port = address.rsplit(":", 1)
            self.socket = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
            self.target = (host, int(port))
        else:
            self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.target = address
        self.socket.setblocking(False)
        self.dropped = 0

    def send(self, line):
        try:
            self.socket.sendto(("<%d>%s: %s" % (self.priority, TAG, line)).encode("utf-8"), self.target)
        except OSError:
            self.dropped += 1

    def close(self):
        self.socket.close()
