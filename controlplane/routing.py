from django.urls import path

from apps.evals.consumers import EvalRunConsumer
from apps.jobs.consumers import JobConsumer
from apps.telemetry.consumers import DeploymentLiveConsumer

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/", JobConsumer.as_asgi()),
    path("ws/deployments/<int:deployment_id>/", DeploymentLiveConsumer.as_asgi()),
    path("ws/evalruns/<int:run_id>/", EvalRunConsumer.as_asgi()),
]
