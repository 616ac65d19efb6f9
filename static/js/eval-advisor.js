// The P:D ratio advisor's charts (templates/evals/advisor.html): output token/s per NPU against TTFT and TPOT at the
// chosen statistic, one trace per layout, the targets as dashed lines; a click opens the run. Plotly is loaded first.
/* global Plotly */
const CONFIG = { displaylogo: false, responsive: true };
const LAYOUT = { margin: { l: 64, r: 24, t: 44, b: 52 }, font: { family: "system-ui, sans-serif", size: 12 },
                 legend: { orientation: "h", y: -0.2 } };

function figure(d, metric) {
  const traces = d.layouts.map((layout) => {
    const pts = layout.points.filter((p) => p[metric] !== null);
    return { type: "scatter", mode: "lines+markers+text", name: layout.name, x: pts.map((p) => p[metric]),
             y: pts.map((p) => p.per_npu), text: pts.map((p) => `c=${p.concurrency}`), textposition: "top center",
             customdata: pts.map((p) => p.url),
             marker: { symbol: pts.map((p) => (p.meets ? "circle" : "x")), size: 9 },
             hovertemplate: `%{text}<br>${metric.toUpperCase()} %{x:.1f} ms<br>%{y:.2f} token/s per NPU<extra>%{fullData.name}</extra>` };
  }).filter((t) => t.x.length);
  if (!traces.length) return null;
  const target = d[`${metric}_target`];
  const shapes = target === null ? [] : [{ type: "line", xref: "x", yref: "paper", x0: target, x1: target, y0: 0, y1: 1,
                                           line: { color: "#c5221f", dash: "dash", width: 2 } }];
  const annotations = target === null ? [] : [{ x: target, y: 1, xref: "x", yref: "paper", showarrow: false,
                                                text: `target ${target} ms`, yanchor: "bottom", font: { color: "#c5221f" } }];
  return [traces, { ...LAYOUT, shapes, annotations,
    title: { text: `Throughput per NPU against ${metric.toUpperCase()} ${d.stat} (x: missed the targets)` },
    xaxis: { title: { text: `${metric.toUpperCase()} ${d.stat} (ms)` } },
    yaxis: { title: { text: "output token/s per NPU" }, rangemode: "tozero" } }];
}

for (const el of document.querySelectorAll(".chart[data-chart^='advisor-']")) {
  const source = document.getElementById(el.dataset.source);
  if (!source) continue;
  const built = figure(JSON.parse(source.textContent), el.dataset.chart.replace("advisor-", ""));
  if (!built) {
    el.innerHTML = '<p class="empty" style="padding:12px">No measured runs to chart.</p>';
    continue;
  }
  Plotly.react(el, built[0], built[1], CONFIG);
  el.on("plotly_click", (ev) => { const url = ev.points[0] && ev.points[0].customdata; if (url) window.location = url; });
}
