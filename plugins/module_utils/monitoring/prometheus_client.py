# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The Prometheus API for the modules that read it (prometheus_gate, gpu_fleet_report), over monitoring/http.py:
``PrometheusClient.from_params(params)`` (the options of monitoring_http_argument_spec()) or
``PrometheusClient.at(url, timeout=...)``; ``call(path, form)`` gives ``(data, warnings)`` or raises
PrometheusAnswerError with a one-line reason."""

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.http import MonitoringApi
from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.prometheus import PrometheusAnswerError, parse_api_answer

SERVICE = "Prometheus"


class PrometheusClient:
    def __init__(self, api):
        self.api = api

    @classmethod
    def from_params(cls, params):
        return cls(MonitoringApi.from_params(SERVICE, PrometheusAnswerError, params))

    @classmethod
    def at(cls, url, **options):
        """The other options (monitoring_http_argument_spec()'s names) at their defaults unless given."""
        return cls(MonitoringApi(SERVICE, PrometheusAnswerError, url, **options))

    def call(self, path, form=None):
        """``(data, warnings)`` of the answer to ``path`` (POST with ``form`` when given); PrometheusAnswerError
        otherwise."""
        return parse_api_answer(*self.api.request("GET" if form is None else "POST", path, form=form))
