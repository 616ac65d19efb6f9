"""The instance page in a real browser: with history points stored for an instance, plotly draws them (the values
read back from the plots are the stored ones, seconds as ms), a chart whose fields were never measured says so, and
picking another window asks the server again and draws that tier's points; the deployment page draws the proxy's."""

from datetime import timedelta
from pathlib import Path

import pytest

from tests.e2e.pages import SHOWN_MS, logged_in_page

pytestmark = [pytest.mark.procs, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RAW = 12  # one point every 5 s for the last minute
MINUTES = 30  # one point a minute for the last half hour


@pytest.fixture
def deployment_with_history():
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from apps.accounts.roles import Role, set_role
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import
    from apps.telemetry.models import MetricPoint

    set_role(get_user_model().objects.create_user("watcher", password="e2e-password-123"), Role.VIEWER)
    inventory_import((EXAMPLES / "reference-cluster.yaml").read_text())
    deployment = deployment_create(name="reference", cluster=Cluster.objects.get(name="reference"), user=None,
                                   yaml_text=(EXAMPLES / "reference-topology-fixed.yaml").read_text())
    now = timezone.now()
    raw = [MetricPoint(deployment=deployment, tier="raw", at=now - timedelta(seconds=5 * (RAW - k)), subject="inst:d0",
                       values={"kv_usage": round(0.1 + 0.05 * k, 3), "running": k, "waiting": 12 - k,
                               "ttft_p50_s": round(0.1 + 0.01 * k, 3), "ttft_p99_s": round(0.3 + 0.02 * k, 3),
                               "kv_in_bytes_s": 1.5e9 + 1e8 * k, "kv_out_bytes_s": None})
           for k in range(RAW)]
    minutes = [MetricPoint(deployment=deployment, tier="1m", at=now - timedelta(minutes=MINUTES - k), subject="inst:d0",
                           values={"kv_usage": round(0.5 + 0.01 * k, 3), "running": 20 + k})
               for k in range(MINUTES)]
    proxy = [MetricPoint(deployment=deployment, tier="raw", at=now - timedelta(seconds=5 * (RAW - k)), subject="proxy",
                         values={"req_s": 2.0 + k, "inflight": k % 3, "ttft_s": 0.25})
             for k in range(RAW)]
    MetricPoint.objects.bulk_create(raw + minutes + proxy)
    return deployment, raw, minutes, proxy


def _plotted(page, section: str, chart: str) -> list[dict]:
    """The traces plotly holds for one chart: name and y values, as the page has them."""
    return page.locator(f"#{section} .history-chart[data-chart={chart}]").evaluate(
        "el => el.data.map(t => ({name: t.name, x: t.x.length, y: Array.from(t.y)}))")


def test_instance_charts_draw_the_stored_history_and_follow_the_window(live_stack, browser, deployment_with_history,
                                                                      tmp_path):
    from playwright.sync_api import expect

    deployment, raw, minutes, proxy = deployment_with_history
    page, errors = logged_in_page(browser, live_stack, console_errors=True)
    page.goto(f"{live_stack}/deployments/{deployment.pk}/instances/d0/")

    section = page.locator("#instance-charts")
    expect(section).to_have_attribute("data-loaded-window", "15m", timeout=SHOWN_MS)
    expect(page.locator("#instance-charts [data-chart=kv-usage]")).to_have_attribute("data-state", "drawn")
    assert _plotted(page, "instance-charts", "kv-usage") == [
        {"name": "KV cache", "x": RAW, "y": [p.values["kv_usage"] for p in raw]}]
    requests = _plotted(page, "instance-charts", "requests")
    assert [t["y"] for t in requests] == [[p.values["running"] for p in raw], [p.values["waiting"] for p in raw]]
    ttft = _plotted(page, "instance-charts", "ttft")
    assert [t["name"] for t in ttft] == ["p50", "p99"]
    assert ttft[0]["y"] == pytest.approx([p.values["ttft_p50_s"] * 1000 for p in raw])  # seconds drawn as ms
    kv_bytes = _plotted(page, "instance-charts", "kv-bytes")
    assert kv_bytes[0]["y"] == [p.values["kv_in_bytes_s"] for p in raw] and kv_bytes[1]["y"] == [None] * RAW
    assert "ms" in page.locator("#instance-charts [data-chart=ttft] .ytick").first.text_content()
    page.screenshot(path=str(tmp_path / "instance-15m.png"), full_page=True)
    # never measured: a sentence, not an empty plot
    itl = page.locator("#instance-charts [data-chart=itl]")
    expect(itl).to_have_attribute("data-state", "empty")
    expect(itl).to_contain_text("no history yet")
    assert itl.locator(".main-svg").count() == 0

    # another window: the server is asked again and that tier's points are drawn
    with page.expect_response(lambda r: "/history/" in r.url and "window=6h" in r.url) as answer:
        page.click("#instance-charts [data-window-choice='6h']")
    assert answer.value.json()["tier"] == "1m"
    expect(section).to_have_attribute("data-loaded-window", "6h", timeout=SHOWN_MS)
    expect(page.locator("#instance-charts [data-window-choice='6h']")).to_have_attribute("aria-pressed", "true")
    assert _plotted(page, "instance-charts", "kv-usage")[0]["y"] == [p.values["kv_usage"] for p in minutes]
    expect(page.locator("#instance-charts [data-chart=ttft]")).to_contain_text("no history yet")

    # the deployment page: the proxy's charts, loaded into it
    page.goto(f"{live_stack}/deployments/{deployment.pk}/")
    expect(page.locator("#service-charts")).to_have_attribute("data-loaded-window", "15m", timeout=SHOWN_MS)
    assert _plotted(page, "service-charts", "proxy-requests")[0]["y"] == [p.values["req_s"] for p in proxy]
    expect(page.locator("#service-charts [data-chart=pool-keys]")).to_contain_text("no history yet")
    page.locator("#service-charts").screenshot(path=str(tmp_path / "service-charts.png"))
    assert errors == []
