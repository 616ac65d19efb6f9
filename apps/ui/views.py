"""The shell's own page: the dashboard, with every deployment's state at a glance (a partial the page polls every
5 s), the clusters and the latest jobs (login and logout are Django's)."""

from django.db.models import F, OuterRef, Subquery
from django.shortcuts import render

from apps.accounts.access import viewer_required
from apps.evals.choices import EvalMode, EvalStatus
from apps.evals.models import EvalRun
from apps.inventory.selectors import clusters_with_counts
from apps.jobs.models import Job
from apps.telemetry.overview import deployments_overview

OVERVIEW_POLL_S = 5


def eval_headline(run: EvalRun) -> dict:
    """A finished run's main figures: the accuracy score of an accuracy run, the throughput and mean TTFT of a
    performance run, both for a run of both."""
    out = {"run": run, "accuracy": None, "tok_s": None, "ttft_ms": None}
    if run.mode in (EvalMode.ACCURACY, EvalMode.BOTH):
        out["accuracy"] = run.accuracy
    if run.mode in (EvalMode.PERFORMANCE, EvalMode.BOTH):
        out["tok_s"] = (run.perf_summary or {}).get("output_token_throughput")
        out["ttft_ms"] = ((run.perf_percentiles or {}).get("TTFT") or {}).get("avg")
    return out


def latest_evaluations(deployment_ids: list[int]) -> dict[int, dict]:
    """The last succeeded run of each deployment, in one query."""
    if not deployment_ids:
        return {}
    latest = (EvalRun.objects.filter(deployment_id=OuterRef("deployment_id"), status=EvalStatus.SUCCEEDED)
              .order_by("-finished", "-id").values("pk")[:1])
    runs = (EvalRun.objects.filter(deployment_id__in=deployment_ids, status=EvalStatus.SUCCEEDED)
            .annotate(latest_pk=Subquery(latest)).filter(pk=F("latest_pk"))
            .only("deployment_id", "mode", "dataset_abbr", "accuracy", "perf_summary", "perf_percentiles", "finished"))
    return {r.deployment_id: eval_headline(r) for r in runs}


def _overview():
    rows = deployments_overview()
    scores = latest_evaluations([r.deployment.pk for r in rows])
    for row in rows:
        row.evaluation = scores.get(row.deployment.pk)
    return rows


@viewer_required
def dashboard(request):
    return render(request, "ui/dashboard.html", {
        "overview": _overview(), "poll_s": OVERVIEW_POLL_S,
        "clusters": clusters_with_counts(),
        "jobs": Job.objects.select_related("created_by")[:10],
    })


@viewer_required
def overview(request):
    return render(request, "ui/_overview.html", {"overview": _overview(), "poll_s": OVERVIEW_POLL_S})
