// Sparklines: the last rounds of an instance's token rate (prompt tok/s for Prefill, generation for Decode), from
// the server's history and each round pushed since.
import { fmtRate } from "./format.js";
import { picture } from "./state.js";
import { el, tip } from "./svg.js";

export const SPARK_W = 64;
const SPARK_H = 12;
export const SPARK_FIELD = { prefill: "prompt_tok_s", decode: "gen_tok_s" };
const HISTORY_LEN = 60;

export function remember(live) {
  if (!live || picture.rounds.at(-1)?.at === live.at) return;
  const values = {};
  for (const [name, v] of Object.entries(live.instances)) values[name] = { prompt_tok_s: v.prompt_tok_s, gen_tok_s: v.gen_tok_s };
  picture.rounds.push({ at: live.at, values });
  if (picture.rounds.length > HISTORY_LEN) picture.rounds.shift();
}

// A round pushes only its own sparkline values (history_point): appended to the series the snapshot brought.
export function appendRound(history, point) {
  const h = history ?? { at: [], instances: {}, edges: {} };
  if (!point || h.at.at(-1) === point.at) return h;
  const before = h.at.length;
  h.at.push(point.at);
  for (const name of new Set([...Object.keys(h.instances), ...Object.keys(point.instances ?? {})])) {
    const series = (h.instances[name] ??= {});
    const values = point.instances?.[name] ?? {};
    for (const field of new Set([...Object.keys(series), ...Object.keys(values)])) {
      (series[field] ??= new Array(before).fill(null)).push(values[field] ?? null);
    }
  }
  if (h.at.length > HISTORY_LEN) {
    const cut = h.at.length - HISTORY_LEN;
    h.at.splice(0, cut);
    for (const series of Object.values(h.instances)) for (const list of Object.values(series)) list.splice(0, cut);
  }
  return h;
}

export function sparkSeries(live, name, field) {
  const fromServer = live.history?.instances?.[name];
  if (fromServer && field in fromServer) return fromServer[field];
  return picture.rounds.map((r) => r.values[name]?.[field] ?? null);
}

// A polyline of the rounds with a value (gaps are skipped, not drawn as zero), scaled to the series' own maximum;
// null when fewer than two rounds have one.
export function sparkline(parent, x, y, series, label) {
  const points = series.map((v, i) => [i, v]).filter(([, v]) => v !== null && v !== undefined && Number.isFinite(v));
  if (points.length < 2) return null;
  const max = Math.max(...points.map(([, v]) => v)) || 1;
  const step = SPARK_W / Math.max(1, series.length - 1);
  const d = points.map(([i, v], k) => `${k ? "L" : "M"}${(x + i * step).toFixed(1)},${(y + SPARK_H - (v / max) * SPARK_H).toFixed(1)}`).join(" ");
  const g = el("g", { class: "sparkline" }, parent);
  el("rect", { x: x - 2, y: y - 1, width: SPARK_W + 4, height: SPARK_H + 2, rx: 2, class: "spark-bg" }, g);
  el("path", { d, class: "spark-line" }, g);
  tip(g, `${label}: last ${points.length} rounds, peak ${fmtRate(max, "tok/s")}`);
  return g;
}
