"""The P:D ratio advisor page: the form (group, targets, statistic), the advice, the measured layouts, the chart.
Thin: advisor_selectors reads and judges; a bad parameter is shown on its field with a 400."""

from django.shortcuts import render
from django.urls import reverse

from apps.accounts.access import viewer_required

from .advisor import STATS, Advice, BadAdvisorQuery, Targets, parse_query
from .advisor_selectors import advisor_for

FORM_FIELDS = ("group", "ttft_ms", "tpot_ms", "stat")


def chart_data(advice: Advice) -> dict:
    """One trace per layout: throughput per NPU against TTFT and TPOT at the chosen statistic; the target lines."""
    traces = []
    for layout in advice.layouts:
        traces.append({"name": layout.layout.key, "points": [
            {"run": p.record.run_id, "url": reverse("evals:detail", args=[p.record.run_id]),
             "concurrency": p.record.concurrency, "per_npu": p.per_npu, "ttft": p.ttft_ms, "tpot": p.tpot_ms,
             "meets": p.meets} for p in layout.points]})
    return {"stat": advice.targets.stat, "ttft_target": advice.targets.ttft_ms,
            "tpot_target": advice.targets.tpot_ms, "layouts": traces}


@viewer_required
def advisor_page(request):
    values = {name: request.GET.get(name, "") for name in FORM_FIELDS}
    errors = {}
    try:
        targets, group_key = parse_query(request.GET)
        view = advisor_for(targets, group_key)
    except BadAdvisorQuery as exc:
        errors = exc.errors
        view = advisor_for(Targets(None, None), None)  # still show what was measured
    return render(request, "evals/advisor.html", {
        "values": values, "errors": errors, "stats": list(STATS), "view": view,
        "chart_data": chart_data(view.advice) if view and not errors else None,
    }, status=400 if errors else 200)
