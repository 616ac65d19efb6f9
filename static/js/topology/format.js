// How the picture writes numbers: id ranges, port windows, rates, bytes/s, milliseconds, percentages.

export function ranges(ids) {
  // [0,1,2,3,8] -> "0-3,8"
  const out = [];
  let start = null, prev = null;
  for (const id of [...ids].sort((a, b) => a - b)) {
    if (start === null) { start = prev = id; continue; }
    if (id === prev + 1) { prev = id; continue; }
    out.push(start === prev ? `${start}` : `${start}-${prev}`);
    start = prev = id;
  }
  if (start !== null) out.push(start === prev ? `${start}` : `${start}-${prev}`);
  return out.join(",");
}

export const windowText = (w) => (w && w.length ? (w[0] === w[1] ? `${w[0]}` : `${w[0]}-${w[1]}`) : "—");

export function fmtRate(v, unit) {
  if (v === null || v === undefined) return "—";
  if (v >= 10000) return `${Math.round(v / 1000)}k ${unit}`;
  if (v >= 1000) return `${(v / 1000).toFixed(1)}k ${unit}`;
  if (v >= 100) return `${Math.round(v)} ${unit}`;
  return `${v >= 10 ? v.toFixed(0) : v.toFixed(1)} ${unit}`;
}

export function fmtBytes(v) {
  if (v === null || v === undefined) return "—";
  const units = ["B/s", "KB/s", "MB/s", "GB/s", "TB/s"];
  let k = 0;
  while (v >= 1000 && k < units.length - 1) { v /= 1000; k++; }
  return `${v >= 100 ? v.toFixed(0) : v.toFixed(1)} ${units[k]}`;
}

export const fmtMs = (s) => (s === null || s === undefined ? "—" : `${s < 0.01 ? (s * 1000).toFixed(1) : Math.round(s * 1000)} ms`);
export const num = (v) => (v === null || v === undefined ? "—" : `${Math.round(v)}`);
export const pct = (v) => (v === null || v === undefined ? "—" : `${Math.round(v * 100)}%`);

export const sumOf = (vals) => {
  const known = vals.filter((v) => v !== null && v !== undefined);
  return known.length ? known.reduce((a, b) => a + b, 0) : null;
};

export function finishText(success, rates) {
  const reasons = Object.keys(success ?? {}).sort();
  if (!reasons.length) return "—";
  return reasons.map((r) => `${r} ${num(success[r])}${rates && rates[r] !== undefined ? ` (${fmtRate(rates[r], "/s")})` : ""}`).join(", ");
}
