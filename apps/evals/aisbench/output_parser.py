"""Everything a finished (or failed) AISBench run left behind, as typed values: the one import for callers.

Accuracy: parse_accuracy(run_dir) -> [DatasetAccuracy]; performance: parse_performance(run_dir) ->
[DatasetPerformance]; judge(work_dir, mode) -> Verdict; results made elsewhere: read_upload(name, data) and
read_pasted(text) -> ImportedResults. Bad files raise OutputError naming the file and place."""

from apps.evals.aisbench.accuracy_output import (
    DatasetAccuracy,
    FailedSample,
    SampleDetail,
    parse_accuracy,
    parse_summary,
)
from apps.evals.aisbench.imports import ImportedResults, read_pasted, read_upload
from apps.evals.aisbench.output_files import OutputError, strip_ansi
from apps.evals.aisbench.perf_output import (
    DatasetPerformance,
    Distribution,
    Quantity,
    RequestRow,
    parse_distributions,
    parse_metrics,
    parse_performance,
    parse_requests,
)
from apps.evals.aisbench.rundir import latest_run_dir
from apps.evals.aisbench.verdict import Verdict, judge

__all__ = [
    "DatasetAccuracy", "DatasetPerformance", "Distribution", "FailedSample", "ImportedResults", "OutputError",
    "Quantity", "RequestRow", "SampleDetail", "Verdict", "judge", "latest_run_dir", "parse_accuracy",
    "parse_distributions", "parse_metrics", "parse_performance", "parse_requests", "parse_summary", "read_pasted",
    "read_upload", "strip_ansi",
]
