// The eval pages' plotly charts, built from the JSON each page embeds (json_script); the page loads plotly first.
/* global Plotly */
const CONFIG = { displaylogo: false, responsive: true };
const LAYOUT = { margin: { l: 64, r: 24, t: 44, b: 52 }, font: { family: "system-ui, sans-serif", size: 12 },
                 legend: { orientation: "h", y: -0.2 } };
const axis = (text, extra = {}) => ({ title: { text }, ...extra });

const builders = {
  latency(d) {
    if (!d.ttft.length && !d.e2el.length) return null;
    return [[
      { type: "histogram", x: d.ttft, name: "TTFT", opacity: 0.7, marker: { color: "#1a73e8" } },
      { type: "histogram", x: d.e2el, name: "E2EL", opacity: 0.6, marker: { color: "#c77700" } },
    ], { title: { text: "Latency distribution" }, barmode: "overlay", xaxis: axis("ms"), yaxis: axis("requests") }];
  },
  timeline(d) {
    const t = d.timeline;
    if (!t.length) return null;
    const first = t.filter((r) => r.ttft !== null);
    return [[
      { type: "bar", orientation: "h", base: t.map((r) => r.start), x: t.map((r) => r.e2el), y: t.map((r) => r.i),
        name: "request, start → end", marker: { color: t.map((r) => (r.ok ? "#60a5fa" : "#c5221f")) },
        hovertemplate: "request %{y}<br>start %{base:.0f} ms<br>E2EL %{x:.0f} ms<extra></extra>" },
      { type: "scatter", mode: "markers", x: first.map((r) => r.start + r.ttft), y: first.map((r) => r.i),
        name: "first token", marker: { symbol: "line-ns-open", size: 10, color: "#12263f", line: { width: 2 } },
        hovertemplate: "request %{y}<br>first token at %{x:.0f} ms<extra></extra>" },
    ], { title: { text: "Per-request timeline (red: failed)" }, bargap: 0.15,
         xaxis: axis("ms since the first request"), yaxis: axis("request", { autorange: "reversed" }) }];
  },
  "compare-percentiles"(d) {
    if (!d.labels.length) return null;
    return [d.runs.map((name, i) => ({ type: "bar", name, x: d.labels, y: d.values[i] })),
            { title: { text: "Latency percentiles" }, barmode: "group", yaxis: axis("ms") }];
  },
  "compare-accuracy"(d) {
    if (d.accuracy.every((v) => v === null)) return null;
    return [[{ type: "bar", x: d.runs, y: d.accuracy, marker: { color: "#1e8e3e" },
               text: d.accuracy.map((v) => (v === null ? "" : `${v.toFixed(2)}%`)), textposition: "auto" }],
            { title: { text: "Accuracy" }, yaxis: axis("%", { range: [0, 100] }) }];
  },
  sweep(d) {
    const p = d.points;
    if (!p.length) return null;
    const labels = p.map((pt) => `c=${pt.concurrency}`);
    const line = (name, key, extra) => ({ type: "scatter", mode: "lines+markers+text", name, text: labels,
      textposition: "top center", x: p.map((pt) => pt.throughput), y: p.map((pt) => pt[key]), ...extra });
    return [[line("TTFT p90", "ttft_p90", {}), line("TPOT p90", "tpot_p90", { yaxis: "y2", line: { dash: "dot" } })],
            { title: { text: "Throughput against latency, one point per concurrency" }, margin: { ...LAYOUT.margin, r: 72 },
              xaxis: axis("output token throughput (token/s)"), yaxis: axis("TTFT p90 (ms)"),
              yaxis2: axis("TPOT p90 (ms)", { overlaying: "y", side: "right" }) }];
  },
};

function draw(el) {
  const source = document.getElementById(el.dataset.source);
  const build = builders[el.dataset.chart];
  if (!source || !build) return;
  const figure = build(JSON.parse(source.textContent));
  if (!figure) {
    Plotly.purge(el);
    el.innerHTML = '<p class="empty" style="padding:12px">No results to chart yet.</p>';
    return;
  }
  if (!el.classList.contains("js-plotly-plot")) el.textContent = "";
  Plotly.react(el, figure[0], { ...LAYOUT, ...figure[1] }, CONFIG);
}

const drawAll = () => document.querySelectorAll(".chart[data-chart]").forEach(draw);
drawAll();
document.body.addEventListener("htmx:afterSettle", drawAll);  // the sweep's table and data refresh every 2 s
