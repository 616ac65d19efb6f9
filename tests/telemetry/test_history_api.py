"""GET /api/deployments/<id>/history/ and the selectors under it: tier choice by window, columns per field, gaps,
and the errors (each naming its field)."""

from datetime import UTC, datetime, timedelta

import pytest

from apps.telemetry.history import WINDOWS, series, subjects
from apps.telemetry.history.tiers import tier_for
from apps.telemetry.models import HistoryTier, MetricPoint

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def point(deployment, subject, seconds_ago, tier=HistoryTier.RAW, **values):
    return MetricPoint(deployment=deployment, tier=tier, subject=subject, at=NOW - timedelta(seconds=seconds_ago),
                       values=values)


def url(deployment):
    return f"/api/deployments/{deployment.pk}/history/"


def test_the_window_picks_the_finest_tier_kept_that_long(settings):
    assert [tier_for(WINDOWS[w]) for w in ("15m", "1h", "6h", "1d", "7d", "30d")] == ["raw", "raw", "1m", "1m",
                                                                                       "10m", "10m"]
    settings.PDCP_HISTORY_RAW_HOURS = 6
    assert tier_for(WINDOWS["6h"]) == "raw"
    settings.PDCP_HISTORY_TEN_MINUTE_DAYS = 7
    assert tier_for(WINDOWS["30d"]) == "10m"  # no tier keeps it that long: the coarsest one


def test_series_reads_the_windows_points_of_its_tier_oldest_first(deployment):
    MetricPoint.objects.bulk_create([
        point(deployment, "inst:p0", 10, kv_usage=0.5, running=3),
        point(deployment, "inst:p0", 5, kv_usage=0.25, ttft_p99_s=None),
        point(deployment, "inst:p0", 0, running=1),
        point(deployment, "inst:p0", 3601, kv_usage=0.9),  # before the window
        point(deployment, "inst:p0", 60, tier=HistoryTier.MINUTE, kv_usage=0.1),  # another tier
        point(deployment, "inst:d0", 5, kv_usage=0.7),  # another subject
    ])
    out = series(deployment, "inst:p0", window_s=3600, now=NOW)
    assert out["tier"] == "raw" and out["step_s"] == 5 and out["window_s"] == 3600 and out["subject"] == "inst:p0"
    assert out["at"] == ["2026-12-02T11:59:50Z", "2026-12-02T11:59:55Z", "2026-12-02T12:00:00Z"]
    assert out["series"] == {"kv_usage": [0.5, 0.25, None], "running": [3.0, None, 1.0],
                             "ttft_p99_s": [None, None, None]}
    assert series(deployment, "inst:p0", window_s=86400, now=NOW)["series"] == {"kv_usage": [0.1]}


def test_a_gap_in_the_rounds_breaks_the_line(deployment):
    MetricPoint.objects.bulk_create([point(deployment, "proxy", 100, req_s=1.0), point(deployment, "proxy", 95,
                                                                                       req_s=2.0),
                                     point(deployment, "proxy", 30, req_s=3.0)])
    out = series(deployment, "proxy", window_s=900, now=NOW)
    assert out["at"] == ["2026-12-02T11:58:20Z", "2026-12-02T11:58:25Z", "2026-12-02T11:58:30Z",
                         "2026-12-02T11:59:30Z"]
    assert out["series"]["req_s"] == [1.0, 2.0, None, 3.0]


def test_subjects_are_every_subject_with_a_point_in_any_tier(deployment, ref_cluster):
    from apps.deployments.models import Deployment

    other = Deployment.objects.create(name="other", cluster=ref_cluster)
    assert subjects(deployment) == []
    MetricPoint.objects.bulk_create([point(deployment, "inst:p0", 0), point(deployment, "inst:p0", 5),
                                     point(deployment, "inst:d1", 0), point(deployment, "pool", 0),
                                     point(deployment, "proxy", 0, tier=HistoryTier.TEN_MINUTES),
                                     point(deployment, "kv-pool", 0, tier=HistoryTier.MINUTE),
                                     point(other, "inst:x9", 0)])
    assert subjects(deployment) == ["inst:d1", "inst:p0", "kv-pool", "pool", "proxy"]
    assert subjects(deployment.pk) == subjects(deployment)
    assert subjects(other) == ["inst:x9"]


def test_api_answers_the_series(deployment, api_client_for):
    MetricPoint.objects.bulk_create([point(deployment, "inst:p0", 0, kv_usage=0.5)])
    point_now = MetricPoint.objects.get()
    point_now.at = datetime.now(UTC) - timedelta(seconds=2)
    point_now.save()
    resp = api_client_for("viewer").get(url(deployment), {"subject": "inst:p0", "window": "15m"})
    assert resp.status_code == 200, resp.json()
    body = resp.json()
    assert body["tier"] == "raw" and body["window_s"] == 900 and body["series"] == {"kv_usage": [0.5]}
    assert len(body["at"]) == 1 and body["at"][0].endswith("Z")


def test_api_a_subject_with_no_point_in_the_window_is_an_empty_series(deployment, api_client_for):
    # two hours before the real now (the module's NOW is a fixed date the suite may run within an hour of)
    MetricPoint.objects.create(deployment=deployment, tier=HistoryTier.RAW, subject="proxy",
                               at=datetime.now(UTC) - timedelta(hours=2), values={"req_s": 1.0})
    resp = api_client_for("viewer").get(url(deployment), {"subject": "proxy", "window": "1h"})
    assert resp.status_code == 200 and resp.json()["at"] == [] and resp.json()["series"] == {}


@pytest.mark.parametrize(("params", "field", "words"), [
    ({"subject": "inst:p0"}, "window", "required"),
    ({"subject": "inst:p0", "window": "2h"}, "window", "unknown window '2h'"),
    ({"window": "1h"}, "subject", "required"),
    ({"subject": "inst:nope", "window": "1h"}, "subject", "known: inst:p0"),
    ({"subject": "inst:p0", "window": "1h", "step": "5"}, "step", "unknown query parameter"),
])
def test_api_refuses_bad_parameters_naming_them(deployment, api_client_for, params, field, words):
    MetricPoint.objects.bulk_create([point(deployment, "inst:p0", 0, kv_usage=0.5)])
    resp = api_client_for("viewer").get(url(deployment), params)
    assert resp.status_code == 400
    errors = resp.json()["errors"]
    assert [e["field"] for e in errors] == [field] and words in errors[0]["message"]


def test_api_unknown_deployment_and_no_login(deployment, api_client_for, client):
    params = {"subject": "inst:p0", "window": "1h"}
    assert api_client_for("viewer").get(f"/api/deployments/{deployment.pk + 999}/history/", params).status_code == 404
    from rest_framework.test import APIClient

    assert APIClient().get(url(deployment), params).status_code == 401
    assert api_client_for(None).get(url(deployment), params).status_code == 403



def test_a_subject_with_a_process_but_no_point_yet_has_an_empty_history(deployment, api_client_for):
    """A fresh deploy's instance has a Process row before its first round: its charts ask and get nothing yet,
    while a subject nothing names is still refused."""
    from apps.deployments.models import Process

    for key, role, instance in (("d0-dp0", "decode", "d0"), ("kv-pool", "kv_pool", "")):
        Process.objects.create(deployment=deployment, revision=deployment.active_revision, node_name="x", role=role,
                               instance=instance, key=key, address="127.0.0.1", ports=[1], command="x",
                               fingerprint="x", log_path="/x", pid_file="/x")
    client = api_client_for("viewer")
    for subject in ("inst:d0", "kv-pool", "pool"):
        resp = client.get(url(deployment), {"subject": subject, "window": "1h"})
        assert resp.status_code == 200 and resp.json()["at"] == [], (subject, resp.json())
    assert client.get(url(deployment), {"subject": "inst:d9", "window": "1h"}).status_code == 400
