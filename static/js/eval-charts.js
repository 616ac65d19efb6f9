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
    const p = d.percentiles;
    if (!p.labels.length) return null;
    return [d.columns.map((name, i) => ({ type: "bar", name, x: p.labels, y: p.values[i] })),
            { title: { text: `Latency percentiles · ${d.dataset}` }, barmode: "group", yaxis: axis("ms") }];
  },
  "compare-accuracy"(d) {
    const a = d.accuracy;
    if (a.values.every((column) => column.every((v) => v === null))) return null;
    return [d.columns.map((name, i) => ({ type: "bar", name, x: a.labels, y: a.values[i],
                                          text: a.values[i].map((v) => (v === null ? "" : v.toFixed(2))),
                                          textposition: "auto" })),
            { title: { text: `Accuracy · ${d.dataset}` }, barmode: "group", yaxis: axis("score", { rangemode: "tozero" }) }];
  },
  sweep(d) {
    if (!d.lines.length) return null;
    const trace = (line, key, extra) => ({
      type: "scatter", mode: "lines+markers+text", name: `${line.name} ${key.toUpperCase()}`,
      text: line.points.map((pt) => `c=${pt.concurrency}`), textposition: "top center",
      x: line.points.map((pt) => pt.throughput), y: line.points.map((pt) => pt[key]),
      customdata: line.points.map((pt) => pt[`${key}_stat`]),
      hovertemplate: `%{text}<br>%{x:.1f} token/s<br>${key.toUpperCase()} %{customdata} %{y:.1f} ms<extra>${line.name}</extra>`,
      ...extra });
    const traces = d.lines.flatMap((line) => [trace(line, "ttft", {}),
                                              trace(line, "tpot", { yaxis: "y2", line: { dash: "dot" } })]);
    return [traces,
            { title: { text: "Throughput against latency, one point per concurrency" }, margin: { ...LAYOUT.margin, r: 72 },
              xaxis: axis("output token throughput (token/s)"), yaxis: axis(d.ttft_title),
              yaxis2: axis(d.tpot_title, { overlaying: "y", side: "right" }) }];
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
