# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The alertmanager_silence decisions on real Alertmanager 0.25 API v2 answers (tests/unit/fixtures/alertmanager)."""

from __future__ import annotations

import calendar
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.monitoring.alertmanager import (
    AlertmanagerAnswerError,
    api_matcher,
    check_expired,
    comment_of,
    default_matcher_sets,
    filter_params,
    format_matcher,
    matcher_key,
    normalize_matcher_sets,
    owner_of,
    parse_created_id,
    parse_silences,
    plan_present,
    silence_body,
    silences_to_expire,
    summary,
    validate_token,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.timestamps import parse_time

FIXTURES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "alertmanager"))
RUN = "20261203T020000Z-1a2b"
NODE = "gpu-node-01"
AT_2AM = calendar.timegm((2026, 12, 3, 2, 0, 0))


def answer(name):
    """(HTTP status from the file's name, body) of a captured answer."""
    with open(os.path.join(FIXTURES, name)) as fixture:
        return int(name.rsplit("_", 1)[1].split(".")[0]), fixture.read()


@pytest.fixture()
def silences():
    return parse_silences(*answer("get_silences_200.json"))


def ids_by_comment(silences, text):
    return sorted(silence["id"] for silence in silences if text in silence["comment"])


# --------------------------------------------------------------------------- matchers


def test_default_matchers_cover_the_labels_that_name_a_node_in_the_usual_exporters():
    assert default_matcher_sets(NODE) == [['instance=~"gpu-node-01(:[0-9]+)?"'], ['Hostname="gpu-node-01"'],
                                          ['node="gpu-node-01"']]
    sets, errors = normalize_matcher_sets(default_matcher_sets(NODE))
    assert errors == [] and len(sets) == 3


@pytest.mark.parametrize("text,expected", [
    ('node="gpu-node-01"', {"name": "node", "value": "gpu-node-01", "isRegex": False, "isEqual": True}),
    ("severity!='info'", {"name": "severity", "value": "info", "isRegex": False, "isEqual": False}),
    ('instance=~"gpu-node-01(:[0-9]+)?"',
     {"name": "instance", "value": "gpu-node-01(:[0-9]+)?", "isRegex": True, "isEqual": True}),
    ('alertname!~"Watchdog|Info.*"', {"name": "alertname", "value": "Watchdog|Info.*", "isRegex": True,
                                      "isEqual": False}),
    ('comment="say \\"hi\\""', {"name": "comment", "value": 'say "hi"', "isRegex": False, "isEqual": True}),
])
def test_matchers_become_api_v2_matchers_and_read_back_the_same(text, expected):
    assert api_matcher(text) == expected
    assert api_matcher(format_matcher(expected)) == expected


def test_an_element_is_one_matcher_or_a_list_that_must_all_match():
    sets, errors = normalize_matcher_sets(['Hostname="gpu-node-01"', ['node="gpu-node-01"', 'severity!="info"']])
    assert errors == []
    assert sets == [['Hostname="gpu-node-01"'], ['node="gpu-node-01"', 'severity!="info"']]


def test_every_bad_matcher_is_named_at_once():
    sets, errors = normalize_matcher_sets(['node=gpu-node-01', [], 42, ['node=~"("'], ['Hostname="a"', 'x~"y"']])
    assert sets == []
    assert [error.split(":")[0] for error in errors] == ["matchers[0]", "matchers[1] must be a matcher string or a "
                                                         "non-empty list of them, got []", "matchers[2] must be a "
                                                         "matcher string or a non-empty list of them, got 42",
                                                         "matchers[3]", "matchers[4]"]
    assert "invalid regular expression" in errors[3]
    assert "'x~\"y\"'" in errors[4]


@pytest.mark.parametrize("matchers", [['node=~".*"'], ['node!="gpu-node-01"'], ['node=""', 'gpu!~"[0-9]"']])
def test_a_silence_that_would_match_every_alert_is_refused_before_alertmanager_refuses_it(matchers):
    _sets, errors = normalize_matcher_sets([matchers])
    assert errors and "every matcher matches an empty label" in errors[0]


def test_alertmanager_refuses_a_silence_matching_the_empty_string_with_its_own_message():
    with pytest.raises(AlertmanagerAnswerError, match="HTTP 400: silence invalid: at least one matcher must not "
                                                      "match the empty string"):
        parse_created_id(*answer("post_silence_matches_empty_400.json"))


def test_matcher_comparison_ignores_order_and_a_missing_is_equal():
    ours = [api_matcher('node="a"'), api_matcher('gpu=~"0|1"')]
    theirs = [{"name": "gpu", "value": "0|1", "isRegex": True}, {"name": "node", "value": "a", "isRegex": False}]
    assert matcher_key(ours) == matcher_key(theirs)
    assert matcher_key(ours) != matcher_key([api_matcher('node!="a"'), api_matcher('gpu=~"0|1"')])


# --------------------------------------------------------------------------- the marker and the body


def test_the_comment_marker_names_node_and_run_and_is_found_again():
    comment = comment_of("driver upgrade to 615.71.09", NODE, RUN)
    assert comment == "driver upgrade to 615.71.09 [gpuops.nvidia node=gpu-node-01 run=%s]" % RUN
    assert owner_of(comment) == (NODE, RUN)
    assert owner_of(comment_of("", NODE, RUN)) == (NODE, RUN)
    assert owner_of("fan swap, ticket OPS-1234") is None
    assert owner_of(None) is None


@pytest.mark.parametrize("value", ["", "two words", "run]", "[run"])
def test_names_that_would_break_the_marker_are_refused(value):
    assert "must be non-empty, without spaces or brackets" in validate_token("run_id", value)


def test_the_body_starts_now_and_lasts_the_duration():
    body = silence_body(['Hostname="gpu-node-01"'], NODE, RUN, "alice@bastion/" + RUN, "driver upgrade",
                        AT_2AM + 0.25, 7200)
    assert body == {
        "matchers": [{"name": "Hostname", "value": "gpu-node-01", "isRegex": False, "isEqual": True}],
        "startsAt": "2026-12-03T02:00:00.250000Z",
        "endsAt": "2026-12-03T04:00:00.250000Z",
        "createdBy": "alice@bastion/" + RUN,
        "comment": "driver upgrade [gpuops.nvidia node=gpu-node-01 run=%s]" % RUN,
    }
    extended = silence_body(['Hostname="gpu-node-01"'], NODE, RUN, "alice", "x", AT_2AM + 3600, 7200,
                            silence_id="9b14e561", starts_at="2026-12-03T02:00:00.250Z")
    assert extended["id"] == "9b14e561" and extended["startsAt"] == "2026-12-03T02:00:00.250Z"
    assert extended["endsAt"] == "2026-12-03T05:00:00.000000Z"


def test_the_filter_holds_only_equality_matchers_which_alertmanager_compares():
    assert filter_params(['instance=~"gpu-node-01(:[0-9]+)?"']) == []
    assert filter_params(['Hostname="gpu-node-01"', 'severity!="info"', 'x="a\\"b"']) == [
        ("filter", 'Hostname="gpu-node-01"'), ("filter", 'x="a\\"b"')]


# --------------------------------------------------------------------------- Alertmanager's answers


def test_silences_are_read_from_a_real_answer(silences):
    assert len(silences) == 6
    assert sorted(silence["status"]["state"] for silence in silences) == ["active"] * 5 + ["expired"]
    assert parse_created_id(*answer("post_silence_created_200.json"))


@pytest.mark.parametrize("name,message", [
    ("get_silences_bad_filter_400.json", "HTTP 400: bad matcher format: not a matcher"),
    ("wrong_prefix_404.txt", "HTTP 404: 404 page not found"),
])
def test_an_error_answer_is_one_line_naming_status_and_reason(name, message):
    with pytest.raises(AlertmanagerAnswerError) as raised:
        parse_silences(*answer(name))
    assert str(raised.value) == message


def test_an_answer_that_is_not_alertmanagers_is_refused():
    with pytest.raises(AlertmanagerAnswerError, match="not JSON"):
        parse_silences(200, "<html>login</html>")
    with pytest.raises(AlertmanagerAnswerError, match="not a list of silences"):
        parse_silences(200, '{"status": "success", "data": []}')


def test_expiring_a_silence_that_is_gone_is_fine_and_a_bad_request_is_not():
    check_expired(200, "", "3487d5ae")
    check_expired(*answer("delete_silence_unknown_500.json"), silence_id="00000000")
    with pytest.raises(AlertmanagerAnswerError, match="HTTP 422: silenceID in path must be of type uuid"):
        check_expired(*answer("delete_silence_not_uuid_422.json"), silence_id="not-a-uuid")


# --------------------------------------------------------------------------- what to reuse, extend, expire


def test_a_live_silence_of_this_run_with_the_same_matchers_is_reused(silences):
    started = parse_time(silences[1]["startsAt"])
    sets = default_matcher_sets(NODE)
    steps = plan_present(sets, [silences] * 3, NODE, RUN, started + 30, 7200 - 30)
    assert [step for step, _silence in steps] == ["reuse"] * 3
    assert [silence["matchers"][0]["name"] for _step, silence in steps] == ["instance", "Hostname", "node"]


def test_the_filtered_answer_finds_the_silence_of_its_set(silences):
    filtered = parse_silences(*answer("get_silences_filter_hostname_200.json"))
    steps = plan_present([['Hostname="gpu-node-01"']], [filtered], NODE, RUN, parse_time(filtered[0]["startsAt"]),
                         3600)
    assert steps[0][0] == "reuse" and "gpuops.nvidia" in steps[0][1]["comment"]


def test_a_resumed_run_extends_a_silence_that_would_end_during_the_maintenance(silences):
    started = parse_time(silences[1]["startsAt"])
    steps = plan_present([['node="gpu-node-01"']], [silences], NODE, RUN, started + 3600, 7200)
    assert steps[0][0] == "extend"


@pytest.mark.parametrize("node,run_id,matchers", [
    (NODE, "20261203T030000Z-ffff", 'node="gpu-node-01"'),  # another run
    ("gpu-node-03", RUN, 'node="gpu-node-03"'),  # another node
    (NODE, RUN, 'node=~"gpu-node-01"'),  # other matchers
    (NODE, "20261201T010000Z-0000", 'node="gpu-node-01"'),  # that run's silence is expired
])
def test_anything_else_gets_a_new_silence(silences, node, run_id, matchers):
    started = parse_time(silences[1]["startsAt"])
    assert plan_present([[matchers]], [silences], node, run_id, started, 3600) == [("create", None)]


def test_a_persons_silence_on_the_same_labels_is_neither_reused_nor_expired(silences):
    bob = [silence for silence in silences if silence["createdBy"] == "bob"]
    started = parse_time(bob[0]["startsAt"])
    assert plan_present([['Hostname="gpu-node-01"', 'alertname="GPUTemperatureHigh"']], [silences], NODE, RUN,
                        started, 3600) == [("create", None)]
    assert bob[0] not in silences_to_expire(silences, NODE)


def test_the_nodes_live_silences_are_expired_this_runs_or_every_runs(silences):
    this_run = ids_by_comment(silences, "node=gpu-node-01 run=%s" % RUN)
    assert [silence["id"] for silence in silences_to_expire(silences, NODE, RUN)] == this_run
    assert [silence["id"] for silence in silences_to_expire(silences, NODE)] == this_run  # the old run's: expired
    assert [silence["id"] for silence in silences_to_expire(silences, "gpu-node-02", RUN)] == ids_by_comment(
        silences, "node=gpu-node-02")
    assert silences_to_expire(silences, NODE, "20261201T010000Z-0000") == []


def test_the_summary_says_what_was_done(silences):
    result = summary(silences[1], "expired")
    assert result == {"id": silences[1]["id"], "action": "expired", "matchers": ['instance=~"gpu-node-01(:[0-9]+)?"'],
                      "starts_at": silences[1]["startsAt"], "ends_at": silences[1]["endsAt"],
                      "created_by": "alice@bastion/" + RUN, "comment": silences[1]["comment"]}
