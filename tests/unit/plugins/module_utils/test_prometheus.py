# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The prometheus_gate decisions on real Prometheus 2.42 API answers (tests/unit/fixtures/prometheus)."""

from __future__ import annotations

import math
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.prometheus import (
    PrometheusAnswerError,
    aggregate_samples,
    evaluate_query,
    failed_query,
    format_labels,
    format_value,
    matching_firing_alerts,
    meets_threshold,
    parse_alerts_data,
    parse_api_answer,
    parse_matcher,
    parse_query_data,
    seconds_until_next_evaluation,
    validate_query_specs,
    verdict,
)

FIXTURES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "prometheus"))


def answer(name, http_status=200):
    with open(os.path.join(FIXTURES, name)) as fixture:
        return http_status, fixture.read()


def samples_of(name):
    return parse_query_data(parse_api_answer(*answer(name))[0])


def spec(**overrides):
    base = {"name": "gpu temperature", "query": "DCGM_FI_DEV_GPU_TEMP", "op": "<", "threshold": 85.0,
            "aggregate": "each", "required": True}
    base.update(overrides)
    return base


# ---------------------------------------------------------------- answers


def test_vector_answer_gives_one_sample_per_series_with_its_labels():
    samples = samples_of("query_vector_gpu_temp.json")
    assert [(sample["labels"]["gpu"], sample["value"]) for sample in samples] == [("0", 91.0), ("1", 42.0)]
    assert samples[0]["labels"]["Hostname"] == "gpu-node-01"
    assert samples[0]["labels"]["UUID"] == "GPU-5fb5a1b7-0000-4000-8000-000000000000"


def test_aggregated_vector_keeps_only_the_grouping_labels():
    assert samples_of("query_vector_max_by_hostname.json") == [{"labels": {"Hostname": "gpu-node-01"}, "value": 91.0}]


def test_empty_vector_gives_no_samples():
    assert samples_of("query_vector_empty.json") == []


def test_scalar_answer_gives_one_sample_without_labels():
    assert samples_of("query_scalar.json") == [{"labels": {}, "value": 91.0}]


def test_infinity_and_nan_as_prometheus_writes_them_are_read():
    assert samples_of("query_scalar_inf.json")[0]["value"] == math.inf
    assert math.isnan(samples_of("query_vector_nan.json")[1]["value"])


def test_range_vector_is_refused_with_how_to_fix_it():
    with pytest.raises(PrometheusAnswerError, match=r"range vector \(matrix\).*max_over_time"):
        samples_of("query_matrix.json")


def test_string_result_is_refused():
    with pytest.raises(PrometheusAnswerError, match="string"):
        samples_of("query_string.json")


def test_parse_error_answer_names_the_error_type_and_message():
    with pytest.raises(PrometheusAnswerError) as raised:
        parse_api_answer(*answer("query_error_bad_data_400.json", 400))
    assert str(raised.value) == ('HTTP 400, bad_data: invalid parameter "query": 1:23: parse error: '
                                 'unexpected end of input')


def test_execution_error_answer_is_an_error():
    with pytest.raises(PrometheusAnswerError, match="HTTP 422, execution: found duplicate series.*many-to-many"):
        parse_api_answer(*answer("query_error_execution_422.json", 422))


def test_body_that_is_not_prometheus_json_is_an_error_quoting_it():
    with pytest.raises(PrometheusAnswerError, match="HTTP 404, not a Prometheus API answer: '404 page not found'"):
        parse_api_answer(*answer("not_found_404.txt", 404))


@pytest.mark.parametrize("body", ['{"data": {}}', "[]", '"success"', ""])
def test_json_without_a_status_is_not_an_answer(body):
    with pytest.raises(PrometheusAnswerError, match="not a Prometheus API answer"):
        parse_api_answer(200, body)


def test_answers_without_warnings_have_none():
    assert parse_api_answer(*answer("query_vector_gpu_temp.json"))[1] == []


def test_warnings_of_an_answer_are_returned_and_kept_on_the_query_result():
    # constructed (PROVENANCE.md): the API envelope's "warnings" field, which Thanos fills on a partial response
    data, warnings = parse_api_answer(*answer("query_vector_with_warning_CONSTRUCTED.json"))
    assert warnings == ["partial response: store 10.0.0.7:10901 unreachable (constructed example)"]
    result = evaluate_query(spec(threshold=95.0), parse_query_data(data), warnings)
    assert (result["passed"], result["warnings"]) == (True, warnings)


def test_success_body_with_an_error_http_status_is_an_error():
    with pytest.raises(PrometheusAnswerError, match="HTTP 503 with a success status"):
        parse_api_answer(*answer("query_scalar.json", 503))


@pytest.mark.parametrize("name", sorted(os.listdir(FIXTURES)))
def test_every_truncation_of_every_answer_is_read_or_refused_never_crashes(name):
    if not name.endswith((".json", ".txt")):
        return
    text = answer(name)[1]
    for cut in range(0, len(text), max(1, len(text) // 40)):
        try:
            data = parse_api_answer(200, text[:cut])[0]
            if name.startswith("alerts"):
                parse_alerts_data(data)
            else:
                parse_query_data(data)
        except PrometheusAnswerError:
            pass


# ---------------------------------------------------------------- thresholds


@pytest.mark.parametrize("op, expected", [("<", False), ("<=", True), (">", False), (">=", True), ("==", True),
                                          ("!=", False)])
def test_each_operator_compares_value_with_threshold(op, expected):
    assert meets_threshold(85.0, op, 85.0) is expected


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_nan_meets_no_threshold_not_even_not_equal(op):
    assert meets_threshold(float("nan"), op, 0.0) is False


def test_each_series_over_threshold_is_one_violation_naming_the_query_and_the_series():
    result = evaluate_query(spec(), samples_of("query_vector_gpu_temp.json"))
    assert result["passed"] is False
    assert len(result["violations"]) == 1
    violation = result["violations"][0]
    assert violation.startswith("query 'gpu temperature': {")
    assert 'gpu="0"' in violation and 'Hostname="gpu-node-01"' in violation
    assert violation.endswith("} is 91, not < 85")
    assert "__name__" not in violation
    assert [value["value"] for value in result["values"]] == [91.0, 42.0]


def test_values_under_threshold_pass():
    result = evaluate_query(spec(threshold=95.0), samples_of("query_vector_gpu_temp.json"))
    assert (result["passed"], result["violations"]) == (True, [])


@pytest.mark.parametrize("aggregate, threshold, passed", [
    ("max", 91.0, False), ("max", 92.0, True), ("min", 43.0, True), ("min", 42.0, False),
    ("sum", 134.0, True), ("sum", 133.0, False), ("avg", 66.5, False), ("avg", 67.0, True),
    ("count", 3.0, True), ("count", 2.0, False),
])
def test_aggregates_reduce_the_series_before_comparing(aggregate, threshold, passed):
    result = evaluate_query(spec(aggregate=aggregate, threshold=threshold), samples_of("query_vector_gpu_temp.json"))
    assert result["passed"] is passed
    if not passed:
        assert result["violations"] == ["query 'gpu temperature': %s {} is %s, not < %s" % (
            aggregate, format_value(aggregate_samples(samples_of("query_vector_gpu_temp.json"), aggregate)[0]["value"]),
            format_value(threshold))]


@pytest.mark.parametrize("aggregate", ["sum", "min", "max", "avg"])
def test_an_aggregate_over_a_nan_series_is_nan_and_fails(aggregate):
    samples = samples_of("query_vector_nan.json")
    result = evaluate_query(spec(query="fb used ratio", aggregate=aggregate, op="<", threshold=0.95), samples)
    assert result["passed"] is False
    assert "is NaN" in result["violations"][0]


def test_nan_series_fails_and_is_returned_as_the_string_nan():
    result = evaluate_query(spec(op="<", threshold=0.95), samples_of("query_vector_nan.json"))
    assert result["passed"] is False
    assert [value["value"] for value in result["values"]] == [pytest.approx(0.012555328044728356), "NaN"]
    assert result["violations"][0].endswith(" is NaN, not < 0.95")


def test_empty_result_of_a_required_query_fails_naming_the_query():
    result = evaluate_query(spec(query='DCGM_FI_DEV_XID_ERRORS{gpu="7"}'), samples_of("query_vector_empty.json"))
    assert result["passed"] is False
    assert result["violations"] == ["query 'gpu temperature' (DCGM_FI_DEV_XID_ERRORS{gpu=\"7\"}) returned no data; "
                                    "it is required to (set required: false when no series means healthy)"]


def test_empty_result_of_an_optional_query_passes():
    result = evaluate_query(spec(required=False, aggregate="count", op="==", threshold=5.0),
                            samples_of("query_vector_empty.json"))
    assert (result["passed"], result["values"]) == (True, [])


def test_stale_ledger_query_detects_allocatable_zero():
    result = evaluate_query(spec(name="allocatable", query="kube_node_status_allocatable == 0", op="==",
                                 threshold=8.0), samples_of("query_vector_allocatable_zero.json"))
    assert result["passed"] is False
    assert 'node="gpu-node-01"' in result["violations"][0]


def test_failed_query_is_a_violation_naming_query_and_reason():
    result = failed_query(spec(), "cannot reach Prometheus at http://127.0.0.1:1: Connection refused")
    assert result["passed"] is False
    assert result["error"] == "cannot reach Prometheus at http://127.0.0.1:1: Connection refused"
    assert result["violations"] == ["query 'gpu temperature' (DCGM_FI_DEV_GPU_TEMP) failed: cannot reach "
                                    "Prometheus at http://127.0.0.1:1: Connection refused"]


def test_query_specs_need_unique_non_empty_names_queries_and_finite_thresholds():
    errors = validate_query_specs([spec(), spec(), spec(name=" "), spec(name="q", query=""),
                                   spec(name="inf", threshold=float("inf"))])
    assert errors == [
        "queries[1]: name 'gpu temperature' is used twice; names must be unique",
        "queries[2]: name must not be empty",
        "queries[3] (q): query must not be empty",
        "queries[4] (inf): threshold must be a finite number",
    ]
    assert validate_query_specs([spec(), spec(name="other")]) == []


@pytest.mark.parametrize("value, text", [(91.0, "91"), (0.95, "0.95"), (-3.0, "-3"), (float("inf"), "+Inf"),
                                         (-float("inf"), "-Inf"), (float("nan"), "NaN"), (1e-9, "0")])
def test_values_are_written_as_people_read_them(value, text):
    assert format_value(value) == text


def test_labels_are_written_sorted_without_the_metric_name():
    assert format_labels({"gpu": "0", "__name__": "X", "Hostname": "n"}) == '{Hostname="n", gpu="0"}'


# ---------------------------------------------------------------- alerts


def alerts_of(name):
    return parse_alerts_data(parse_api_answer(*answer(name))[0])


def test_alerts_answer_gives_name_state_labels_and_since():
    alerts = alerts_of("alerts_firing_xid_pending_temperature.json")
    assert [(alert["name"], alert["state"]) for alert in alerts] == [
        ("GPUXidError", "firing"), ("GPUAllocatableZero", "pending"), ("GPUTemperatureHigh", "pending")]
    assert alerts[0]["labels"]["Hostname"] == "gpu-node-01"
    assert alerts[0]["active_at"] == "2026-12-03T03:08:20.113643416Z"
    assert alerts_of("alerts_none.json") == []


def test_only_firing_alerts_count_not_pending_ones():
    firing = matching_firing_alerts(alerts_of("alerts_firing_xid_pending_temperature.json"), [], [])
    assert [alert["name"] for alert in firing] == ["GPUXidError"]


@pytest.mark.parametrize("names, matchers, expected", [
    ([], [], ["GPUXidError"]),
    (["GPUXidError"], [], ["GPUXidError"]),
    (["GPUTemperatureHigh", "GPUAllocatableZero"], [], []),
    ([], ['severity="critical"'], ["GPUXidError"]),
    ([], ['severity="warning"'], []),
    ([], ['Hostname=~"gpu-node-0[1-4]"', 'gpu!="1"'], ["GPUXidError"]),
    ([], ['Hostname=~"gpu-node"'], []),  # regex matchers are anchored, as in Prometheus
    ([], ['alertname!~"GPUXid.*|Watchdog"'], []),
    ([], ['pod=""'], ["GPUXidError"]),  # a missing label matches the empty string
    ([], ["severity='critical'"], ["GPUXidError"]),
])
def test_firing_alerts_are_filtered_by_name_and_every_matcher(names, matchers, expected):
    parsed = [parse_matcher(text) for text in matchers]
    firing = matching_firing_alerts(alerts_of("alerts_firing_xid_pending_temperature.json"), names, parsed)
    assert [alert["name"] for alert in firing] == expected


@pytest.mark.parametrize("text, expected", [
    ('severity="critical"', ("severity", "=", "critical")),
    (' alertname != "Watchdog" ', ("alertname", "!=", "Watchdog")),
    ('pod=~"trainer-\\\\d+"', ("pod", "=~", "trainer-\\d+")),
    ('summary="say \\"hi\\""', ("summary", "=", 'say "hi"')),
])
def test_matchers_are_read_as_promql_writes_them(text, expected):
    assert parse_matcher(text)[:3] == expected


@pytest.mark.parametrize("text, reason", [
    ("severity=critical", "is not label=\"value\""),
    ('9gpu="0"', "is not label=\"value\""),
    ('severity=="critical"', "is not label=\"value\""),
    ('gpu=~"("', "invalid regular expression"),
    ("", "is not label=\"value\""),
])
def test_bad_matchers_are_refused_with_the_reason(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_matcher(text)


# ---------------------------------------------------------------- verdict and soak


def test_verdict_collects_query_and_alert_violations():
    passing = evaluate_query(spec(threshold=95.0), samples_of("query_vector_gpu_temp.json"))
    failing = evaluate_query(spec(name="hot"), samples_of("query_vector_gpu_temp.json"))
    firing = matching_firing_alerts(alerts_of("alerts_firing_xid_pending_temperature.json"), [], [])
    assert verdict([passing], None) == (True, [])
    assert verdict([passing], {"firing": [], "error": None}) == (True, [])
    passed, violations = verdict([passing, failing], {"firing": firing, "error": None})
    assert passed is False
    assert violations[0].startswith("query 'hot': ")
    assert violations[1].startswith("alert GPUXidError is firing {DCGM_FI_DRIVER_VERSION=\"595.91.07\", ")
    assert violations[1].endswith(" since 2026-12-03T03:08:20.113643416Z")
    assert "alertname" not in violations[1]


def test_unreadable_alerts_fail_the_verdict():
    assert verdict([], {"firing": [], "error": "HTTP 404, not a Prometheus API answer"}) == (
        False, ["alerts could not be read: HTTP 404, not a Prometheus API answer"])


def test_soak_evaluates_at_start_every_interval_and_at_the_end():
    times, elapsed = [0.0], 0.0
    while True:
        delay = seconds_until_next_evaluation(elapsed + 0.25, 70, 30)  # each evaluation takes 0.25 s
        if delay is None:
            break
        elapsed += 0.25 + delay
        times.append(elapsed)
    assert times == [0.0, 30.0, 60.0, 70.0]


def test_no_soak_evaluates_once():
    assert seconds_until_next_evaluation(0.1, 0, 30) is None


def test_an_evaluation_longer_than_the_interval_is_followed_by_the_next_tick():
    assert seconds_until_next_evaluation(31.0, 600, 30) == 29.0
