// The edges between the boxes: the request path, the KV hand-over P -> D (pair by pair, or through one KV fabric
// bus when the mesh has more pairs than the picture can draw), and the lanes into the KV pool.
import { endName } from "../edge-ids.js";
import { windowText } from "./format.js";
import { COLUMNS, frameHead, liveHeight, poolRowY } from "./layout.js";
import { COLOUR } from "./palette.js";
import { picture } from "./state.js";
import { el, label, text, tip } from "./svg.js";

export function defs(svg) {
  const d = el("defs", {}, svg);
  for (const [id, colour] of [["req", "#334155"], ["kv", "#0f766e"], ["pool", COLOUR.purple]]) {
    const m = el("marker", { id: `arrow-${id}`, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7,
      orient: "auto-start-reverse" }, d);
    el("path", { d: "M0,0 L10,5 L0,10 z", fill: colour }, m);
  }
  // For KV edges drawn thick by their flow: a head of fixed size, not one that grows with the line.
  const m = el("marker", { id: "arrow-kvflow", viewBox: "0 0 10 10", refX: 8, refY: 5, markerWidth: 14, markerHeight: 14,
    markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" }, d);
  el("path", { d: "M0,0 L10,5 L0,10 z", fill: "#0f766e" }, m);
}

function path(svg, d, kind, edge, extra = {}) {
  const g = el("g", { class: `edge ${kind}`, "data-kind": edge.kind, "data-source": edge.source, "data-target": edge.target }, svg);
  el("path", { d, class: "edge-line", ...extra }, g);
  tip(g, `${endName(edge.source)} → ${endName(edge.target)}: ${edge.label}`);
  return g;
}

function curve(x1, y1, x2, y2) {
  const dx = Math.max(40, (x2 - x1) / 2);
  return `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`;
}

export function drawEdges(svg, lay, snapshot) {
  const { boxes, band } = lay;
  const edges = snapshot.edges;
  const layer = el("g", { class: "edges" }, svg);
  const labels = el("g", { class: "edge-labels" });
  // Request path.
  for (const e of edges.filter((e) => e.kind === "request")) {
    const a = boxes.get(e.source), b = boxes.get(e.target);
    if (!a || !b) continue;
    if (e.source === "client") {
      const x = a.x + a.w / 2;
      const top = b.nodeBox ? b.nodeBox.y : b.y;
      path(layer, `M${x},${a.y + a.h} L${x},${top - 2}`, "request", e, { "marker-end": "url(#arrow-req)" });
      label(labels, x + 8, (a.y + a.h + top) / 2 + 4, e.label, "start");
    } else {
      const x1 = a.x + a.w, y1 = a.y + a.h / 2, x2 = b.x - 2, y2 = b.y + 14;
      path(layer, curve(x1, y1, x2, y2), "request", e, { "marker-end": "url(#arrow-req)" });
    }
  }
  // KV hand-over P -> D: ports spread along each box side so the pairs stay apart.
  const kv = edges.filter((e) => e.kind === "kv_transfer");
  const outs = new Map(), ins = new Map();
  for (const e of kv) {
    if (!outs.has(e.source)) outs.set(e.source, []);
    if (!ins.has(e.target)) ins.set(e.target, []);
    outs.get(e.source).push(e);
    ins.get(e.target).push(e);
  }
  const spread = (b, k, n) => {
    const top = b.frame ? b.y + frameHead(b.inst) : b.y + 26;
    const bottom = b.y + b.h - 8 - (b.frame || !b.inst ? 0 : liveHeight(b.inst));
    return top + ((bottom - top) * (k + 0.5)) / n;
  };
  for (const e of kv) {
    const a = boxes.get(e.source), b = boxes.get(e.target);
    if (!a || !b) continue;
    const o = outs.get(e.source), i = ins.get(e.target);
    const y1 = spread(a, o.indexOf(e), o.length), y2 = spread(b, i.indexOf(e), i.length);
    const g = path(layer, curve(a.x + a.w, y1, b.x - 2, y2), "kv", e, { "marker-end": "url(#arrow-kv)" });
    picture.kvGeometry.set(e.id, { g, line: g.firstChild, x1: a.x + a.w, y1, x2: b.x - 2, y2 });
  }
  const fabric = edges.filter((e) => e.kind === "kv_fabric");
  if (fabric.length) drawFabric(layer, boxes, fabric, snapshot.kv_mesh, spread);
  // Each window once, where its edges meet the box: out above the first port, in below the last.
  for (const [id, list] of outs) {
    const a = boxes.get(id);
    if (a) label(labels, a.x + a.w + 8, spread(a, 0, list.length) - 7, `out ${windowText(list[0].source_window)}`, "start", "edge-label kv");
  }
  for (const [id, list] of ins) {
    const b = boxes.get(id);
    if (b) label(labels, b.x - 12, spread(b, list.length - 1, list.length) + 16, `in ${windowText(list[0].target_window)}`, "end", "edge-label kv");
  }
  // P -> store (async backup) and P/D -> KV pool: lanes beside the columns, then along the band's top.
  const laneOf = (source, kind) => {
    const b = boxes.get(source);
    const isDecode = b && b.inst && b.inst.role === "decode";
    const pad = b && b.frame ? 4 : 0; // a frame is drawn 4 px wider on each side than its column
    if (isDecode) return { x: COLUMNS.decode.x + COLUMNS.decode.w + 18, from: b.x + b.w + pad };
    return { x: COLUMNS.prefill.x - (kind === "kv_pool" ? 34 : 18), from: b ? b.x - pad : 0 };
  };
  const busY = { kv_backup: band.top - 14, kv_pool: band.top - 30 };
  for (const e of edges.filter((e) => e.kind === "kv_backup" || e.kind === "kv_pool")) {
    const a = boxes.get(e.source), b = boxes.get(e.target);
    if (!a || !b) continue;
    const lane = laneOf(e.source, e.kind);
    const y1 = poolRowY(a) !== null ? poolRowY(a) + 8 : a.y + a.h - (e.kind === "kv_pool" ? 8 : 16);
    const tx = e.kind === "kv_pool" ? b.x + b.w / 2 : b.x + b.w / 2;
    const d = `M${lane.from},${y1} L${lane.x},${y1} L${lane.x},${busY[e.kind]} L${tx},${busY[e.kind]} L${tx},${b.y - 2}`;
    path(layer, d, e.kind === "kv_pool" ? "pool" : "backup", e, { "marker-end": "url(#arrow-pool)" });
  }
  const poolName = band.pool ? (band.pool.service.backend === "memcache" ? "MemCache" : "Mooncake") : "MemCache";
  if (band.pool || band.stores) {
    const target = band.pool ?? band.stores;
    label(labels, target.x + target.w / 2 + 8, busY.kv_pool - 4, `P/D ↔ KV pool (${poolName})`, "start", "edge-label pool");
  }
  svg.appendChild(labels);
}

// A P->D mesh too large to draw pair by pair (snapshot.kv_mesh.aggregated): every Prefill into a KV fabric bus
// between the columns, the bus into every Decode; the live flow is each instance's total, its top peers in the hover.
const FABRIC_X = (COLUMNS.prefill.x + COLUMNS.prefill.w + COLUMNS.decode.x) / 2;

function drawFabric(layer, boxes, fabric, mesh, spread) {
  const rows = [];
  for (const e of fabric) {
    const out = e.side === "out";
    const b = boxes.get(out ? e.source : e.target);
    if (!b) continue;
    const y = spread(b, 0, 1);
    const [x1, x2] = out ? [b.x + b.w, FABRIC_X - 6] : [FABRIC_X + 6, b.x - 2];
    const g = path(layer, `M${x1},${y} L${x2},${y}`, "kv", e, { "marker-end": "url(#arrow-kv)" });
    const name = endName(out ? e.source : e.target);
    picture.kvGeometry.set(e.id, { g, line: g.firstChild, x1, y1: y, x2, y2: y, fabric: { name, side: e.side } });
    rows.push(y);
  }
  if (!rows.length) return;
  const top = Math.min(...rows) - 24, bottom = Math.max(...rows) + 12;
  const g = el("g", { class: "topo-fabric", "data-pairs": mesh?.pairs ?? "" }, layer);
  el("rect", { x: FABRIC_X - 5, y: top, width: 10, height: bottom - top, rx: 4, fill: "#0f766e", opacity: 0.3 }, g);
  text(g, FABRIC_X, top - 6, "KV fabric", { class: "edge-label kv", "text-anchor": "middle" });
  tip(g, `KV hand-over mesh: ${mesh?.prefills ?? "?"} Prefill × ${mesh?.decodes ?? "?"} Decode = `
    + `${(mesh?.pairs ?? 0).toLocaleString()} pairs, more than the ${mesh?.max_drawn_pairs ?? ""} drawn one by one: `
    + "each instance's total KV flow in or out, its busiest peers in its edge's hover");
}

export function bezierAt(g, t) {
  const dx = Math.max(40, (g.x2 - g.x1) / 2);
  const u = 1 - t;
  const x = u ** 3 * g.x1 + 3 * u * u * t * (g.x1 + dx) + 3 * u * t * t * (g.x2 - dx) + t ** 3 * g.x2;
  const y = u ** 3 * g.y1 + 3 * u * u * t * g.y1 + 3 * u * t * t * g.y2 + t ** 3 * g.y2;
  return { x, y };
}
