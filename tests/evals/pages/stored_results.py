"""Results of a small "both" run in the shapes apps/evals/results.py stores them."""

PERF_SUMMARY = {"requests_total": 3, "requests_succeeded": 3, "requests_failed": 0, "duration_ms": 2500.0,
                "request_throughput": 1.2, "output_token_throughput": 123.4, "total_token_throughput": 456.7,
                "concurrency_max": 2}
PERF_PERCENTILES = {
    "TTFT": {"unit": "ms", "avg": 120.5, "min": 100.0, "max": 150.0, "median": 118.0, "p75": 130.0, "p90": 140.0,
             "p99": 149.0, "n": 3},
    "TPOT": {"unit": "ms", "avg": 20.0, "min": 18.0, "max": 22.0, "median": 20.0, "p75": 21.0, "p90": 21.5,
             "p99": 22.0, "n": 3},
}
PERF_REQUESTS = [{"i": i, "success": True, "start_ms": 10.0 * i, "ttft_ms": 100.0 + i, "e2el_ms": 900.0 + i,
                  "input_tokens": 50, "output_tokens": 40} for i in range(3)]
