// History charts (templates/telemetry/_charts.html): each section embeds its charts' definitions (subject, fields,
// unit, whether the subject had history or a process when the page was drawn); the series come from the history
// API, one request per such subject for the picked window, read again every history step (at least 10 s, at most
// 60 s) while the page is shown, so a fresh deploy's charts fill in by themselves. The API refuses a subject it
// cannot know (no point, no process): such charts say "no history yet" until the page is read again. The page
// loads plotly first.
/* global Plotly */
const CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
const LAYOUT = {
  height: 250, margin: { l: 64, r: 16, t: 36, b: 32 }, font: { family: "system-ui, sans-serif", size: 12 },
  hovermode: "x unified", legend: { orientation: "h", x: 1, xanchor: "right", y: 1.16 },
};
const MIN_REFRESH_S = 10;
const MAX_REFRESH_S = 60;

// How a unit is plotted: the factor the stored value is multiplied by, the axis format and the hover format.
const UNITS = {
  percent: { scale: 1, axis: { tickformat: ".0%", rangemode: "tozero" }, hover: ".1%", suffix: "" },
  seconds: { scale: 1000, axis: { ticksuffix: " ms", rangemode: "tozero" }, hover: ",.1f", suffix: " ms" },
  "bytes/s": { scale: 1, axis: { tickformat: "~s", ticksuffix: "B/s", rangemode: "tozero" }, hover: ".3~s", suffix: "B/s" },
  bytes: { scale: 1, axis: { tickformat: "~s", ticksuffix: "B", rangemode: "tozero" }, hover: ".3~s", suffix: "B" },
  "tok/s": { scale: 1, axis: { ticksuffix: " tok/s", rangemode: "tozero" }, hover: ",.1f", suffix: " tok/s" },
  "req/s": { scale: 1, axis: { ticksuffix: " req/s", rangemode: "tozero" }, hover: ",.2f", suffix: " req/s" },
  count: { scale: 1, axis: { rangemode: "tozero" }, hover: ",.4~g", suffix: "" },
};

const pad = (n, w = 2) => String(n).padStart(w, "0");
// plotly draws date strings as given: turn the API's UTC instants into the browser's local time.
function localStamp(ms) {
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} `
    + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

function showEmpty(el, chart, text) {
  if (el.classList.contains("js-plotly-plot")) Plotly.purge(el);
  el.innerHTML = "";
  const p = document.createElement("p");
  p.className = "history-empty empty";
  const title = document.createElement("strong");
  title.textContent = chart.title;
  p.append(title, text);
  el.append(p);
  el.dataset.state = "empty";
}

function drawChart(el, chart, history, windowS) {
  const unit = UNITS[chart.unit] || UNITS.count;
  const at = history.at || [];
  const columns = chart.fields.map((f) => (history.series || {})[f.field] || []);
  if (!at.length || columns.every((col) => col.every((v) => v === null || v === undefined))) {
    showEmpty(el, chart, "no history yet");
    return;
  }
  const x = at.map((t) => localStamp(Date.parse(t)));
  const traces = chart.fields.map((f, i) => ({
    type: "scatter", mode: at.length > 1 ? "lines" : "markers", name: f.label, x, connectgaps: false,
    y: columns[i].map((v) => (v === null || v === undefined ? null : v * unit.scale)),
    hovertemplate: `%{y:${unit.hover}}${unit.suffix}<extra>${f.label}</extra>`,
  }));
  const now = Date.now();
  const layout = {
    ...LAYOUT, title: { text: chart.title, font: { size: 13 }, x: 0.02 }, showlegend: chart.fields.length > 1,
    xaxis: { type: "date", range: [localStamp(now - windowS * 1000), localStamp(now)] }, yaxis: { ...unit.axis },
  };
  if (!el.classList.contains("js-plotly-plot")) el.textContent = "";
  Plotly.react(el, traces, layout, CONFIG);
  el.dataset.state = "drawn";
}

const NO_HISTORY = { at: [], series: {}, step_s: 0, tier: null };

async function fetchHistory(section, subject, windowName) {
  const url = new URL(section.dataset.url, location.href);
  url.searchParams.set("subject", subject);
  url.searchParams.set("window", windowName);
  const resp = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  const body = await resp.json().catch(() => ({}));
  if (resp.status === 400 && (body.errors || []).some((e) => e.field === "subject")) return NO_HISTORY;  // all expired
  if (!resp.ok) {
    const why = (body.errors || []).map((e) => `${e.field}: ${e.message}`).join("; ") || body.detail;
    throw new Error(`${subject}: ${why || `HTTP ${resp.status}`}`);
  }
  return body;
}

function setup(section) {
  section.dataset.ready = "1";
  const charts = JSON.parse(section.querySelector('script[type="application/json"]').textContent);
  const status = section.querySelector(".history-status");
  const subjects = [...new Set(charts.filter((c) => c.has_history).map((c) => c.subject))];
  let windowName = section.dataset.window;
  const windowSeconds = (name) => Number(section.querySelector(`[data-window-choice="${name}"]`).dataset.windowS);
  let timer = null;
  let sequence = 0;

  async function load() {
    clearTimeout(timer);
    const mine = ++sequence;
    const asked = windowName;
    let results;
    try {
      results = await Promise.all(subjects.map((s) => fetchHistory(section, s, asked)));
    } catch (err) {
      if (mine !== sequence) return;
      status.textContent = `could not read the history (${err.message}); trying again`;
      section.dataset.state = "error";
      timer = setTimeout(load, MAX_REFRESH_S * 1000);
      return;
    }
    if (mine !== sequence) return;  // the window changed while this was on its way
    const bySubject = Object.fromEntries(subjects.map((s, i) => [s, results[i]]));
    for (const chart of charts) {
      const el = section.querySelector(`.history-chart[data-chart="${chart.id}"]`);
      if (el) drawChart(el, chart, bySubject[chart.subject] || NO_HISTORY, windowSeconds(asked));
    }
    const step = Math.max(0, ...results.map((r) => r.step_s || 0));
    const refreshS = Math.min(MAX_REFRESH_S, Math.max(MIN_REFRESH_S, step));
    const tiers = [...new Set(results.map((r) => r.tier).filter(Boolean))].join(", ");
    status.textContent = tiers ? `${asked} · ${tiers} points every ${step} s · read ${new Date().toLocaleTimeString()}`
      : "no history yet";
    section.dataset.state = "loaded";
    section.dataset.loadedWindow = asked;
    section.dataset.loads = String(Number(section.dataset.loads || 0) + 1);
    timer = setTimeout(() => { if (!document.hidden) load(); else timer = null; }, refreshS * 1000);
  }

  section.querySelectorAll("[data-window-choice]").forEach((button) => {
    button.addEventListener("click", () => {
      windowName = button.dataset.windowChoice;
      section.dataset.window = windowName;
      section.querySelectorAll("[data-window-choice]").forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
      status.textContent = "loading…";
      load();
    });
  });
  document.addEventListener("visibilitychange", () => { if (!document.hidden && timer === null) load(); });
  load();
}

const setupAll = () => document.querySelectorAll("section.history-charts:not([data-ready])").forEach(setup);
setupAll();
document.body.addEventListener("htmx:afterSettle", setupAll);  // the deployment page loads its charts by htmx
