"""The topology page in Debian's Chromium (Playwright, launched as tests/e2e/conftest.py `browser`), measured from
outside static/js/topology/: an init script wraps the page's WebSocket so the time of each `onmessage` handler
(the live update: drawLive, or a full redraw) is recorded, and a MutationObserver notes when the SVG first holds
every instance box. Times are the page's performance.now() (0 = navigation start) and Date.now() (wall clock,
the same host's as the bench's time.time())."""

from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync",
               "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]

INIT_JS = """
(() => {
  window.__bench = { updates: [], seen: {}, want: null, rendered: null, boxes: 0, expect: __EXPECT__, sockets: 0 };
  const B = window.__bench;
  const Native = window.WebSocket;
  class Timed extends Native {
    constructor(...args) { super(...args); B.sockets += 1; }
    set onmessage(fn) {
      super.onmessage = (e) => {
        const t0 = performance.now();
        fn(e);
        const t1 = performance.now();
        const u = { start: t0, ms: t1 - t0, bytes: e.data.length, frame_ms: null };
        B.updates.push(u);
        requestAnimationFrame(() => { u.frame_ms = performance.now() - t0; });
        const w = B.want;
        if (w && !(w.k in B.seen)) {
          const g = document.querySelector(`#topology .live-instance[data-instance="${w.name}"]`);
          if (g && g.textContent.includes(w.text)) B.seen[w.k] = Date.now();
        }
      };
    }
    get onmessage() { return super.onmessage; }
  }
  window.WebSocket = Timed;
  new MutationObserver(() => {
    if (B.rendered !== null) return;
    const n = document.querySelectorAll("#topology svg .topo-instance").length;
    if (n >= B.expect) { B.rendered = performance.now(); B.boxes = n; }
  }).observe(document, { childList: true, subtree: true });
})();
"""


class Page:
    def __init__(self, playwright, base: str, username: str, password: str, instances: int):
        self.browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        self.context = self.browser.new_context(viewport={"width": 1400, "height": 1000})
        self.context.add_init_script(INIT_JS.replace("__EXPECT__", str(int(instances))))
        self.base, self.instances = base, instances
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.goto(f"{base}/login/")
        self.page.fill("input[name=username]", username)
        self.page.fill("input[name=password]", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_load_state()

    def first_render(self, deployment_id: int) -> dict:
        """Navigation start -> every instance box in the SVG; the snapshot's fetch within it."""
        self.page.goto(f"{self.base}/deployments/{deployment_id}/")
        self.page.wait_for_function("window.__bench.rendered !== null", timeout=60000, polling=100)
        self.page.wait_for_function("document.querySelector('#topology').dataset.ws === 'open'", timeout=30000)
        return self.page.evaluate("""() => {
          const r = performance.getEntriesByType('resource').find((e) => e.name.includes('topology.json'));
          const nav = performance.getEntriesByType('navigation')[0];
          return { render_ms: window.__bench.rendered, boxes: window.__bench.boxes,
                   html_ms: nav.responseEnd, json_start_ms: r ? r.requestStart : null, json_end_ms: r ? r.responseEnd : null,
                   json_bytes: r ? r.decodedBodySize : null,
                   svg_elements: document.querySelectorAll('#topology svg *').length,
                   kv_edges: document.querySelectorAll('#topology .edge[data-kind=kv_transfer]').length };
        }""")

    def updates(self) -> list[dict]:
        return self.page.evaluate("window.__bench.updates")

    def wait_updates(self, count: int, timeout_s: float) -> None:
        self.page.wait_for_function(f"window.__bench.updates.length >= {count}", timeout=timeout_s * 1000, polling=50)

    def expect_text(self, k: int, instance: str, text: str) -> None:
        self.page.evaluate("w => { window.__bench.want = w; }", {"k": str(k), "name": instance, "text": text})

    def wait_seen(self, k: int, timeout_s: float) -> float | None:
        """Wall-clock seconds at which the page's update handler had drawn the expected text; None if it did not
        within timeout_s."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        try:
            self.page.wait_for_function(f"'{k}' in window.__bench.seen", timeout=timeout_s * 1000, polling=50)
        except PlaywrightTimeout:
            return None
        return self.page.evaluate(f"window.__bench.seen['{k}']") / 1000

    def sockets(self) -> int:
        """WebSockets the page opened since it was loaded (more than one: it reconnected)."""
        return self.page.evaluate("window.__bench.sockets")

    def close(self) -> None:
        self.context.close()
        self.browser.close()
