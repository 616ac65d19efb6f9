"""The advisor's reads: finished performance runs with stored results as plain records, and the advice for one
group (apps/evals/advisor.py judges them). Shared by the page and the API."""

from __future__ import annotations

from dataclasses import dataclass

from .advisor import Advice, BadAdvisorQuery, Group, GroupKey, RunRecord, Targets, advise, groups_of
from .choices import EvalMode, EvalStatus
from .models import EvalRun

RECORD_FIELDS = ("id", "sweep_id", "deployment_name", "revision_number", "served_model", "dataset_key", "max_out_len",
                 "api_style", "concurrency", "perf_summary", "perf_percentiles", "revision_spec", "ignore_eos")


def _stats(percentiles: dict, metric: str) -> dict:
    stats = percentiles.get(metric)
    return dict(stats) if isinstance(stats, dict) else {}


def record_of(run: EvalRun) -> RunRecord:
    summary = run.perf_summary if isinstance(run.perf_summary, dict) else {}
    percentiles = run.perf_percentiles if isinstance(run.perf_percentiles, dict) else {}
    return RunRecord(
        run_id=run.pk, sweep_id=run.sweep_id, deployment=run.deployment_name, revision=run.revision_number,
        model=run.served_model, dataset=run.dataset_key, max_out_len=run.max_out_len, api_style=run.api_style,
        concurrency=run.concurrency, output_throughput=summary.get("output_token_throughput"),
        request_throughput=summary.get("request_throughput"), ttft=_stats(percentiles, "TTFT"),
        tpot=_stats(percentiles, "TPOT"), input_tokens_mean=_stats(percentiles, "InputTokens").get("avg"),
        spec=run.revision_spec, ignore_eos=run.ignore_eos)


def measured_records() -> list[RunRecord]:
    """Succeeded performance (or both) runs whose performance pass stored an output throughput."""
    runs = (EvalRun.objects.filter(status=EvalStatus.SUCCEEDED, mode__in=[EvalMode.PERFORMANCE, EvalMode.BOTH],
                                   perf_summary__has_key="output_token_throughput")
            .only(*RECORD_FIELDS).order_by("id"))
    return [record_of(run) for run in runs]


@dataclass
class AdvisorView:
    groups: list[Group]
    group: Group | None  # the one advised on: asked for, else the one with the most runs
    advice: Advice


def advisor_for(targets: Targets, group_key: GroupKey | None) -> AdvisorView:
    """BadAdvisorQuery(group=...) when the group asked for has no measured runs."""
    records = measured_records()
    groups = groups_of(records)
    if group_key is None:
        group = groups[0] if groups else None
    else:
        group = next((g for g in groups if g.key == group_key), None)
        if group is None:
            known = ", ".join(g.key.text for g in groups[:10]) or "none yet"
            raise BadAdvisorQuery({"group": f"no measured runs in group {group_key.text!r}; groups: {known}"})
    advice = advise(records, targets, group.key if group else None) if group else advise([], targets, None)
    return AdvisorView(groups, group, advice)
