"""What the control plane offers other monitoring: Prometheus service discovery of what it deployed (sd.py) and its
own /metrics (selfmetrics.py, views.py)."""
