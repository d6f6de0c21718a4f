# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Alertmanager's API v2 for alertmanager_silence, over monitoring/http.py: ``AlertmanagerClient(params)`` with the
options of monitoring_http_argument_spec(); its calls raise AlertmanagerAnswerError when Alertmanager cannot be
reached or answers with an error."""

from __future__ import annotations

from urllib.parse import quote

from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.http import MonitoringApi
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.alertmanager import (
    AlertmanagerAnswerError,
    check_expired,
    parse_created_id,
    parse_silences,
)


class AlertmanagerClient:
    def __init__(self, params):
        self.api = MonitoringApi.from_params("Alertmanager", AlertmanagerAnswerError, params)

    def silences(self, filters=()):
        """The silences that pass ``filters`` (from filter_params; all silences without), expired ones included."""
        return parse_silences(*self.api.request("GET", "/api/v2/silences", query=list(filters) or None))

    def post_silence(self, body):
        return parse_created_id(*self.api.request("POST", "/api/v2/silences", json_body=body))

    def expire(self, silence_id):
        status, text = self.api.request("DELETE", "/api/v2/silence/%s" % quote(silence_id, safe=""))
        check_expired(status, text, silence_id)
