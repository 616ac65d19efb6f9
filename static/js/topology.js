// Topology picture of a deployment: draws the read model (/deployments/<pk>/topology.json) as an SVG, in columns
// by stage (client/proxy | Prefill nodes | Decode nodes) with the KV pool and store below. Re-fetches every 5 s
// while a job of the deployment is pending or running, so the picture shows the state the job left behind.
// Live load (apps.telemetry: running/waiting, KV usage, token rates per instance; req/s and KV bytes/s per P->D
// edge) comes with the snapshot and then over /ws/deployments/<id>/, redrawing only the live layer.
import { endName, kvEdgeInstances, processEnd } from "./edge-ids.js";
import { liveSocket } from "./live-socket.js";

const NS = "http://www.w3.org/2000/svg";
const POLL_MS = 5000;
const WIDTH = 1350;
const COLUMNS = {
  front: { x: 16, w: 220 },
  prefill: { x: 336, w: 380 },
  decode: { x: 904, w: 410 },
};
const COLOUR = { green: "#1e8e3e", amber: "#c77700", red: "#c5221f", blue: "#1a73e8", grey: "#6b7280", purple: "#7c3aed" };
const TINT = { green: "#e6f4ea", amber: "#fef3e0", red: "#fce8e6", blue: "#e8f0fe", grey: "#f3f4f6", purple: "#f3e8ff" };
const ROLE_HUE = { prefill: 214, decode: 140 };
const CELL_H = 26;
const RANK_ROW = 17;
const LIVE_ROW = 18;

const root = document.getElementById("topology");

function el(tag, attrs = {}, parent = null) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function text(parent, x, y, str, attrs = {}) {
  const t = el("text", { x, y, ...attrs }, parent);
  t.textContent = str;
  return t;
}

// Text widths from a canvas with the element's font (looked up once per class): SVG's getComputedTextLength()
// forces a layout of the whole picture each time, which at 256 instances costs more than the drawing.
const measureCtx = document.createElement("canvas").getContext("2d");
const fontOf = new Map();
function textWidth(t) {
  const cls = t.getAttribute("class") ?? "";
  let font = fontOf.get(cls);
  if (font === undefined) {
    const probe = t.isConnected ? t : (svgNow ?? root).appendChild(t.cloneNode(false)); // detached: a stand-in
    const cs = getComputedStyle(probe);
    if (probe !== t) probe.remove();
    font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    fontOf.set(cls, font);
  }
  measureCtx.font = font;
  return measureCtx.measureText(t.textContent).width;
}

function tip(parent, str) {
  el("title", {}, parent).textContent = str;
}

function ranges(ids) {
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

const windowText = (w) => (w && w.length ? (w[0] === w[1] ? `${w[0]}` : `${w[0]}-${w[1]}`) : "—");

// One colour per DP rank on a node: the role's hue, lightness stepping through the node's ranks in order.
function rankColours(snapshot) {
  const colours = new Map();
  for (const node of snapshot.nodes) {
    const ranks = [];
    for (const inst of snapshot.instances) {
      for (const r of inst.ranks) if (rankNode(inst, r) === node.name) ranks.push([inst, r]);
    }
    ranks.forEach(([inst, r], k) => {
      const light = ranks.length > 1 ? 30 + (40 * k) / (ranks.length - 1) : 42;
      colours.set(`${inst.name}/${r.dp_rank}`, { fill: `hsl(${ROLE_HUE[inst.role] ?? 270} 70% ${light}%)`, dark: light < 56 });
    });
  }
  return colours;
}

// --- layout ------------------------------------------------------------------------------------------------
// An instance on one node is a box inside its node box. An instance that spans nodes is a frame around its node
// boxes (labelled with its name and "TP x DP over n nodes", live load in its head), and inside each node box a
// slice: that node's ranks (one row each while few, else one summary row), headless ones dashed.

let liveRows = false; // whether the boxes were laid out with a row for live load
let poolOf = new Map(); // instance id -> what it does with the KV pool (its edge's mode): a row for the pool when live

const rankNode = (inst, r) => r.node ?? inst.node;
const spans = (inst) => (inst.nodes?.length ?? 1) > 1;
const FRAME_HEAD = 22;
const FRAME_PAD = 8;
const POOL_ROW = 15;
const SLICE_HEAD = 20;
const MAX_RANK_ROWS = 4; // more ranks than this on one node: one summary row (each rank stays in the hover)

function liveHeight(inst) {
  return liveRows ? LIVE_ROW + (poolOf.has(inst.id) ? POOL_ROW : 0) : 0;
}

function instanceHeight(inst) {
  return 22 + inst.ranks.length * RANK_ROW + 6 + liveHeight(inst);
}

function sliceRows(slice) {
  const n = slice.ranks.length ? slice.ranks[1] - slice.ranks[0] + 1 : 0;
  return n > MAX_RANK_ROWS ? 1 : Math.max(1, n);
}

function sliceHeight(slice) {
  return SLICE_HEAD + sliceRows(slice) * RANK_ROW + 4;
}

function frameHead(inst) {
  return FRAME_HEAD + liveHeight(inst) + 2;
}

// What a node box holds, in drawing order: whole instances, and slices of instances that span nodes.
function hostedParts(node, snapshot) {
  const parts = [];
  for (const name of node.instances ?? []) {
    const inst = snapshot.instances.find((i) => i.name === name);
    if (!inst) continue;
    if (spans(inst)) {
      const slice = inst.slices?.find((s) => s.node === node.name);
      if (slice) parts.push({ inst, slice, h: sliceHeight(slice) });
    } else {
      parts.push({ inst, slice: null, h: instanceHeight(inst) });
    }
  }
  return parts;
}

function diesHeight(node) {
  return node.dies.length ? Math.ceil(node.dies.length / 16) * (CELL_H + 4) + 8 : 0;
}

function nodeHeight(node, snapshot, hosted) {
  let h = 40 + diesHeight(node);
  for (const part of hostedParts(node, snapshot)) h += part.h + 6;
  if (hosted.proxy) h += 34;
  if (hosted.others.length) h += 16;
  return h + 4;
}

function placeNode(snapshot, node, x, y, w, boxes) {
  const services = snapshot.services.filter((s) => s.node === node.name);
  const hosted = { proxy: services.find((s) => s.role === "proxy"), others: services.filter((s) => s.role !== "proxy") };
  const box = { x, y, w, h: nodeHeight(node, snapshot, hosted), node, hosted, parts: [] };
  box.strip = { x: box.x + 10, y: box.y + 36 };
  let py = box.y + 40 + diesHeight(node);
  for (const part of hostedParts(node, snapshot)) {
    const pb = { x: box.x + 10, y: py, w: box.w - 20, h: part.h, inst: part.inst, slice: part.slice };
    if (part.slice) box.parts.push(pb);
    else boxes.set(part.inst.id, pb);
    py += pb.h + 6;
  }
  if (hosted.proxy) {
    boxes.set(hosted.proxy.id, { x: box.x + 10, y: py, w: box.w - 20, h: 28, service: hosted.proxy, nodeBox: box });
    py += 34;
  }
  box.hostedY = py + 10;
  return box;
}

function layout(snapshot) {
  const boxes = new Map(); // id -> {x, y, w, h}
  const placed = [];
  const frames = [];
  const top = 16;
  const bottoms = { front: top, prefill: top, decode: top };
  const client = { x: COLUMNS.front.x + 30, y: top, w: COLUMNS.front.w - 60, h: 44 };
  boxes.set("client", client);
  bottoms.front = top + client.h + 56;
  const order = { front: 0, services: 1, prefill: 2, decode: 3 };
  const index = new Map(snapshot.nodes.map((n, k) => [n.name, k]));
  // Plan order within a column: an instance's nodes stay together, its DP master first.
  const nodes = [...snapshot.nodes].sort((a, b) => order[a.column] - order[b.column] || index.get(a.name) - index.get(b.name));
  const done = new Set();
  for (const node of nodes) {
    if (done.has(node.name)) continue;
    const colName = node.column === "services" ? "front" : node.column;
    const col = COLUMNS[colName];
    const inst = node.span ? snapshot.instances.find((i) => i.name === node.span.instance) : null;
    if (!inst) {
      const box = placeNode(snapshot, node, col.x, bottoms[colName], col.w, boxes);
      bottoms[colName] = box.y + box.h + 26;
      placed.push(box);
      done.add(node.name);
      continue;
    }
    const frame = { x: col.x, y: bottoms[colName], w: col.w, h: 0, inst, frame: true, nodes: [] };
    let y = frame.y + frameHead(inst);
    for (const name of inst.nodes) {
      const member = snapshot.nodes.find((n) => n.name === name);
      if (!member || done.has(name)) continue;
      const box = placeNode(snapshot, member, col.x + FRAME_PAD, y, col.w - 2 * FRAME_PAD, boxes);
      placed.push(box);
      frame.nodes.push(box);
      done.add(name);
      y = box.y + box.h + 8;
    }
    frame.h = y - frame.y;
    boxes.set(inst.id, frame);
    frames.push(frame);
    bottoms[colName] = frame.y + frame.h + 26;
  }
  const bandTop = Math.max(...Object.values(bottoms)) + 50;
  const stores = snapshot.services.filter((s) => s.role === "store");
  const pool = snapshot.services.find((s) => s.role === "kv_pool");
  const band = { top: bandTop, stores: null, pool: null };
  if (stores.length) {
    const col = COLUMNS.prefill;
    band.stores = { x: col.x, y: bandTop, w: col.w, h: 74, group: true };
    boxes.set("group:store", band.stores);
    const w = (col.w - 20 - (stores.length - 1) * 8) / stores.length;
    stores.forEach((s, i) => boxes.set(s.id, { x: col.x + 10 + i * (w + 8), y: bandTop + 8, w, h: 40, service: s }));
  }
  if (pool) {
    const col = COLUMNS.decode;
    const b = { x: col.x + 40, y: bandTop + 8, w: col.w - 80, h: 44, service: pool };
    band.pool = b;
    boxes.set(pool.id, b);
  }
  const height = bandTop + (stores.length || pool ? 118 : 0) + 10;
  return { boxes, placed, frames, band, height };
}

// --- drawing -----------------------------------------------------------------------------------------------

function defs(svg) {
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

function drawNode(svg, box, snapshot, colours) {
  const { node } = box;
  const g = el("g", { class: "topo-node", "data-node": node.name, "data-column": node.column }, svg);
  tip(g, `${node.name} ${node.address}\n${node.hardware_model || "hardware unknown"}${node.npu_model ? ` · ${node.npu_model}` : ""}`
    + `\n${node.dies.length} NPU dies · ${node.reachability_label}\nprocesses: ${node.processes.join(", ")}`);
  el("rect", { x: box.x, y: box.y, width: box.w, height: box.h, rx: 8, class: "node-box" }, g);
  const name = text(g, box.x + 10, box.y + 19, node.name, { class: "node-name" });
  const sub = text(g, box.x + 18 + textWidth(name), box.y + 19,
    `${node.address} · ${node.hardware_model || "—"}`, { class: "node-sub" });
  el("circle", { cx: box.x + box.w - 14, cy: box.y + 14, r: 5, fill: COLOUR[node.reachability_colour] || COLOUR.grey,
    class: "reach" }, g);
  const reach = text(g, box.x + box.w - 24, box.y + 18, node.reachability_label.toLowerCase(),
    { class: "node-sub", "text-anchor": "end" });
  // Narrow boxes: the reachability word gives way to the address (the dot and the hover keep it).
  if (box.x + 18 + textWidth(name) + textWidth(sub) + 8 > box.x + box.w - 24 - textWidth(reach)) {
    reach.remove();
  }
  if (node.dies.length) drawDies(g, box, node, colours);
  for (const part of hostedParts(node, snapshot)) {
    if (part.slice) drawSlice(g, box.parts.find((p) => p.slice === part.slice), colours);
    else drawInstance(g, part.inst, colours);
  }
  if (box.hosted.others.length) {
    text(g, box.x + 10, box.hostedY, `also hosts: ${box.hosted.others.map((s) => `${s.key} :${s.ports[0]}`).join(", ")} (below)`,
      { class: "node-sub" });
  }
}

function drawDies(g, box, node, colours) {
  const gapPair = 5, gapDie = 1;
  const cellW = (box.w - 20 - 7 * gapPair - 8 * gapDie) / 16;
  node.dies.forEach((die, i) => {
    const row = Math.floor(i / 16), col = i % 16;
    const x = box.strip.x + col * cellW + Math.floor(col / 2) * gapPair + Math.ceil(col / 2) * gapDie;
    const y = box.strip.y + row * (CELL_H + 4);
    const c = die.used_by ? colours.get(`${die.used_by.instance}/${die.used_by.dp_rank}`) : null;
    const cell = el("g", { class: `die${die.ok ? "" : " bad"}${die.used_by ? " used" : ""}`, "data-logical-id": die.logical_id,
      "data-used-by": die.used_by ? `${die.used_by.instance}/dp${die.used_by.dp_rank}` : "" }, g);
    el("rect", { x, y, width: cellW, height: CELL_H, rx: 3, fill: c ? c.fill : "#eef1f5",
      stroke: die.ok ? (c ? "none" : "#cbd5e1") : COLOUR.red, "stroke-width": die.ok ? 1 : 2.5 }, cell);
    if (die.hbm_percent !== null) {
      el("rect", { x: x + 2, y: y + CELL_H - 5, width: Math.max(0, (cellW - 4) * die.hbm_percent / 100), height: 3,
        fill: c && c.dark ? "rgba(255,255,255,.85)" : "#1d4ed8", class: "hbm" }, cell);
    }
    text(cell, x + cellW / 2, y + 15, `${die.logical_id}`, { class: `die-id${c && c.dark ? " on-dark" : ""}`, "text-anchor": "middle" });
    const hbm = die.hbm_percent === null ? "HBM not read" : `HBM ${die.hbm_percent}% (${die.hbm_used_mb}/${die.hbm_total_mb} MB)`;
    tip(cell, `${node.name} die ${die.logical_id} (NPU ${die.npu_id} chip ${die.chip_id})\nhealth ${die.health ?? "not discovered"} · ${hbm}`
      + `\n${die.used_by ? `used by ${die.used_by.instance} DP rank ${die.used_by.dp_rank} (${die.used_by.key})` : "free"}`);
  });
}

function stateStyle(obj) {
  const colour = obj.state ? (COLOUR[obj.state_colour] || COLOUR.grey) : "#9ca3af";
  return { colour, tint: obj.state ? (TINT[obj.state_colour] || TINT.grey) : "#fafafa" };
}

let boxesNow = new Map();

function rankTip(r) {
  return `${r.key} (DP rank ${r.dp_rank}) on ${r.node ?? ""} ${r.address}${r.headless ? " — headless (--headless: no API server)" : ""}`
    + `\nstate: ${r.state_label}${r.state_detail ? ` — ${r.state_detail}` : ""}`
    + `\npid: ${r.pid ?? "—"}${r.started_revision ? ` (started from r${r.started_revision})` : ""}`
    + `\nports: ${r.ports.length ? r.ports.join(", ") : "none"} · KV side channel ${windowText(r.kv_port_window)}`
    + `\ndevices (ASCEND_RT_VISIBLE_DEVICES): ${r.devices.join(",")}\nhealth: ${r.health_url ?? "—"}`;
}

function drawRank(parent, inst, r, x, y, w, colours) {
  const row = el("g", { class: `rank${r.headless ? " headless" : ""}`, "data-key": r.key, "data-dp-rank": r.dp_rank }, parent);
  const c = colours.get(`${inst.name}/${r.dp_rank}`);
  el("rect", { x: x + 8, y: y + 2, width: 12, height: 12, rx: 2, fill: c ? c.fill : "#ddd" }, row);
  const rs = stateStyle(r);
  el("circle", { cx: x + w - 12, cy: y + 8, r: 4.5, fill: rs.colour }, row);
  const port = r.headless ? "headless" : `:${r.api_port}`;
  const base = `dp${r.dp_rank}  ${port}  dies ${ranges(r.devices)}  kv ${windowText(r.kv_port_window)}`;
  const line = text(row, x + 26, y + 12, base + (r.pid ? `  pid ${r.pid}` : ""), { class: "rank-text" });
  if (textWidth(line) > w - 50) line.textContent = base; // the pid stays in the hover
  tip(row, rankTip(r));
}

function drawInstance(parent, inst, colours) {
  const b = boxesNow.get(inst.id);
  const { colour, tint } = stateStyle(inst);
  const g = el("g", { class: `topo-instance role-${inst.role}`, "data-instance": inst.name, "data-state": inst.state ?? "none" },
    instanceLink(parent, inst.name));
  el("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 6, fill: tint, stroke: colour, "stroke-width": 2,
    "stroke-dasharray": inst.state ? null : "4 3" }, g);
  const name = text(g, b.x + 8, b.y + 15, `${inst.name}`, { class: "inst-name" });
  text(g, b.x + 16 + textWidth(name), b.y + 15,
    `${inst.role} · TP${inst.tp} × DP${inst.dp}${inst.dp > 1 ? ` (${inst.dp_style})` : ""}${inst.ep ? ` · EP${inst.ep}` : ""} · KV ${windowText(inst.kv_port_window)}`,
    { class: "inst-sub" });
  text(g, b.x + b.w - 8, b.y + 15, inst.state_label, { class: "state-label", fill: colour, "text-anchor": "end" });
  tip(g, `${inst.name} (${inst.role}) on ${inst.node}: ${inst.state_label}${hbmTip(inst)}`);
  inst.ranks.forEach((r, k) => drawRank(g, inst, r, b.x, b.y + 22 + k * RANK_ROW, b.w, colours));
}

// The frame of an instance that spans nodes: drawn under its node boxes, its name and span in the head.
function drawFrame(svg, f) {
  const { inst } = f;
  const { colour, tint } = stateStyle(inst);
  const g = el("g", { class: `topo-instance topo-frame role-${inst.role}`, "data-instance": inst.name,
    "data-state": inst.state ?? "none", "data-nodes": inst.nodes.join(" ") }, instanceLink(svg, inst.name));
  el("rect", { x: f.x - 4, y: f.y, width: f.w + 8, height: f.h, rx: 10, fill: tint, stroke: colour, "stroke-width": 2.5,
    "stroke-dasharray": inst.state ? null : "6 4", class: "frame-box" }, g);
  const name = text(g, f.x + 6, f.y + 16, inst.name, { class: "inst-name frame-name" });
  const sub = text(g, f.x + 14 + textWidth(name), f.y + 16,
    `${inst.role} · ${inst.span_label} (${inst.dp_style}, ${inst.dp_local}/node) · KV ${windowText(inst.kv_port_window)}`,
    { class: "inst-sub" });
  const state = text(g, f.x + f.w - 4, f.y + 16, inst.state_label, { class: "state-label", fill: colour, "text-anchor": "end" });
  if (textWidth(sub) + textWidth(name) + textWidth(state) + 30 > f.w) {
    sub.textContent = `${inst.role} · ${inst.span_label}`;
  }
  const processes = new Set(inst.ranks.map((r) => r.key)).size;
  tip(g, `${inst.name} (${inst.role}): ${inst.span_label}, ${inst.dp_style} DP, ${inst.dp_local} ranks per node, `
    + `${processes} processes\nnodes: ${inst.nodes.join(", ")} (DP master ${inst.node})\nstate: ${inst.state_label}`
    + hbmTip(inst));
}

// The HBM fit estimate per die (apps/deployments/topology/hbm_fit.py, docs/hbm-fit.md), for an instance's hover.
function hbmTip(inst) {
  const h = inst.hbm;
  if (!h) return "";
  const seqs = h.full_sequences == null ? ""
    : `, ${h.full_sequences} full-length sequences${h.max_num_seqs ? ` (max_num_seqs ${h.max_num_seqs})` : ""}`;
  return `\nHBM per die (${h.die_gb} GB, utilization ${h.utilization}): weights ${h.weights_gb} GB · KV ${h.kv_gb} GB`
    + ` · headroom ${h.headroom_gb} GB\nKV holds ${h.kv_tokens.toLocaleString()} tokens per DP rank${seqs} · ${h.status}`;
}

// The part of a spanning instance on one node: its ranks (a row each while few), headless dashed.
function drawSlice(parent, b, colours) {
  const { inst, slice } = b;
  const { colour, tint } = stateStyle(slice);
  const g = el("g", { class: `topo-slice role-${inst.role}${slice.headless ? " headless" : ""}`, "data-instance": inst.name,
    "data-node": slice.node, "data-state": slice.state ?? "none", "data-headless": slice.headless ? "1" : "0" }, parent);
  el("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 6, fill: tint, stroke: colour, "stroke-width": 1.6,
    "stroke-dasharray": slice.headless || !slice.state ? "4 3" : null }, g);
  const [lo, hi] = slice.ranks;
  const head = `${inst.name} · dp${lo === hi ? lo : `${lo}-${hi}`} · ${slice.processes} process${slice.processes > 1 ? "es" : ""}`;
  const name = text(g, b.x + 8, b.y + 14, head, { class: "slice-name" });
  const state = text(g, b.x + b.w - 8, b.y + 14, slice.state_label, { class: "state-label", fill: colour, "text-anchor": "end" });
  if (slice.headless) {
    const tag = text(g, b.x + 16 + textWidth(name), b.y + 14, "headless · no API server", { class: "headless-tag" });
    const room = b.w - 32 - textWidth(name) - textWidth(state);
    if (textWidth(tag) > room) tag.textContent = "headless";
    tip(tag, "an internal-DP secondary (--headless): its ranks answer through the DP master's API server");
  }
  const ranks = inst.ranks.filter((r) => rankNode(inst, r) === slice.node);
  if (ranks.length <= MAX_RANK_ROWS) {
    ranks.forEach((r, k) => drawRank(g, inst, r, b.x, b.y + SLICE_HEAD + k * RANK_ROW, b.w, colours));
    return;
  }
  // Many ranks: one row for all of them, every process in the hover.
  const y = b.y + SLICE_HEAD;
  const row = el("g", { class: "rank rank-summary", "data-keys": slice.keys.join(" ") }, g);
  const first = colours.get(`${inst.name}/${lo}`), last = colours.get(`${inst.name}/${hi}`);
  el("rect", { x: b.x + 8, y: y + 2, width: 6, height: 12, rx: 1, fill: first ? first.fill : "#ddd" }, row);
  el("rect", { x: b.x + 14, y: y + 2, width: 6, height: 12, rx: 1, fill: last ? last.fill : "#ddd" }, row);
  el("circle", { cx: b.x + b.w - 12, cy: y + 8, r: 4.5, fill: colour }, row);
  const ports = slice.headless ? "headless" : slice.api_ports.length ? `:${ranges(slice.api_ports)}` : "—";
  text(row, b.x + 26, y + 12, `${ports}  dies ${ranges(slice.devices)}  kv ${windowText(slice.kv_port_window)}`, { class: "rank-text" });
  const states = ranks.map((r) => `${r.key} dp${r.dp_rank} :${r.api_port ?? "—"} dies ${ranges(r.devices)} · ${r.state_label}`
    + `${r.pid ? ` · pid ${r.pid}` : ""}`);
  tip(row, `${inst.name} on ${slice.node}: ${ranks.length} ranks\n${states.join("\n")}`);
}

function drawService(parent, s, b, label) {
  const { colour, tint } = stateStyle(s);
  const g = el("g", { class: `topo-service role-${s.role}`, "data-key": s.key, "data-state": s.state ?? "none" }, parent);
  el("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 6, fill: tint, stroke: colour, "stroke-width": 2,
    "stroke-dasharray": s.state ? null : "4 3" }, g);
  text(g, b.x + 8, b.y + 17, label, { class: "inst-name" });
  if (b.w >= 200) {
    text(g, b.x + b.w - 8, b.y + 17, s.state_label, { class: "state-label", fill: colour, "text-anchor": "end" });
  } else {
    el("circle", { cx: b.x + b.w - 12, cy: b.y + 12, r: 4.5, fill: colour }, g);
  }
  const where = b.w >= 200 ? `${s.node} ${s.address}:${s.ports.join("/")}${s.pid ? ` · pid ${s.pid}` : ""}`
    : `${s.node}:${s.ports.join("/")}`;
  if (b.h > 30) text(g, b.x + 8, b.y + 33, where, { class: "inst-sub" });
  tip(g, `${s.key} (${s.role}) on ${s.node} ${s.address}\nstate: ${s.state_label}${s.state_detail ? ` — ${s.state_detail}` : ""}`
    + `\npid: ${s.pid ?? "—"} · ports ${s.ports.join(", ")}\nhealth: ${s.health_url ?? "—"}`);
}

const POOL_LABEL = { mooncake: "KV pool · mooncake_master", memcache: "KV pool · MemCache MetaService" };

function drawBand(svg, lay, snapshot) {
  const { band, boxes } = lay;
  if (band.stores) {
    const g = el("g", { class: "topo-store", "data-id": "group:store" }, svg);
    const b = band.stores;
    el("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 8, class: "group-box" }, g);
    const stores = snapshot.services.filter((s) => s.role === "store");
    text(g, b.x + 10, b.y + 66, `KV pool · MemCache played by ${stores.length} memcached server${stores.length > 1 ? "s" : ""} (simulated)`,
      { class: "group-title" });
    for (const s of stores) drawService(g, s, boxes.get(s.id), s.key);
  }
  if (band.pool) {
    const s = band.pool.service;
    const label = POOL_LABEL[s.backend] ?? "KV pool";
    drawService(svg, s, band.pool, snapshot.profile === "sim" && s.backend === "memcache" ? "KV pool · MemCache (memcached)" : label);
  }
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

function label(svg, x, y, str, anchor = "middle", cls = "edge-label") {
  return text(svg, x, y, str, { class: cls, "text-anchor": anchor });
}

function drawEdges(svg, lay, snapshot) {
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
    kvGeometry.set(e.id, { g, line: g.firstChild, x1: a.x + a.w, y1, x2: b.x - 2, y2 });
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
    kvGeometry.set(e.id, { g, line: g.firstChild, x1, y1: y, x2, y2: y, fabric: { name, side: e.side } });
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

function draw(snapshot) {
  const holder = root.querySelector(".topology-canvas");
  holder.replaceChildren();
  kvGeometry.clear();
  svgNow = null;
  healthBoxes = null;
  if (!snapshot.nodes.length) return;
  liveRows = Boolean(snapshot.live);
  poolOf = new Map(snapshot.edges.filter((e) => e.kind === "kv_pool").map((e) => [e.source, e.mode ?? ""]));
  const lay = layout(snapshot);
  boxesNow = lay.boxes;
  const colours = rankColours(snapshot);
  const svg = el("svg", { viewBox: `0 0 ${WIDTH} ${lay.height}`, width: "100%", role: "img", class: "topology-svg",
    "aria-label": `Topology of ${snapshot.deployment.name}` });
  holder.appendChild(svg); // attached first: text is measured while drawing
  defs(svg);
  const c = lay.boxes.get("client");
  const cg = el("g", { class: "topo-client" }, svg);
  el("rect", { x: c.x, y: c.y, width: c.w, height: c.h, rx: 22, class: "client-box" }, cg);
  text(cg, c.x + c.w / 2, c.y + 19, "client", { class: "inst-name", "text-anchor": "middle" });
  text(cg, c.x + c.w / 2, c.y + 35, snapshot.client && snapshot.client.node ? `${snapshot.client.node} ${snapshot.client.address ?? ""}` : "AISBench / users",
    { class: "inst-sub", "text-anchor": "middle" });
  for (const f of lay.frames) drawFrame(svg, f);
  for (const box of lay.placed) drawNode(svg, box, snapshot, colours);
  for (const box of lay.placed) {
    if (box.hosted.proxy) {
      const s = box.hosted.proxy;
      drawService(svg, s, lay.boxes.get(s.id), `proxy :${s.ports[0]}`);
    }
  }
  drawBand(svg, lay, snapshot);
  drawEdges(svg, lay, snapshot);
  svgNow = svg;
  drawLive(snapshot.live);
}

// --- live load ---------------------------------------------------------------------------------------------

let svgNow = null;
const kvGeometry = new Map(); // kv_transfer edge id -> its path group and end points

function fmtRate(v, unit) {
  if (v === null || v === undefined) return "—";
  if (v >= 10000) return `${Math.round(v / 1000)}k ${unit}`;
  if (v >= 1000) return `${(v / 1000).toFixed(1)}k ${unit}`;
  if (v >= 100) return `${Math.round(v)} ${unit}`;
  return `${v >= 10 ? v.toFixed(0) : v.toFixed(1)} ${unit}`;
}

function fmtBytes(v) {
  if (v === null || v === undefined) return "—";
  const units = ["B/s", "KB/s", "MB/s", "GB/s", "TB/s"];
  let k = 0;
  while (v >= 1000 && k < units.length - 1) { v /= 1000; k++; }
  return `${v >= 100 ? v.toFixed(0) : v.toFixed(1)} ${units[k]}`;
}

const fmtMs = (s) => (s === null || s === undefined ? "—" : `${s < 0.01 ? (s * 1000).toFixed(1) : Math.round(s * 1000)} ms`);
const num = (v) => (v === null || v === undefined ? "—" : `${Math.round(v)}`);

function bezierAt(g, t) {
  const dx = Math.max(40, (g.x2 - g.x1) / 2);
  const u = 1 - t;
  const x = u ** 3 * g.x1 + 3 * u * u * t * (g.x1 + dx) + 3 * u * t * t * (g.x2 - dx) + t ** 3 * g.x2;
  const y = u ** 3 * g.y1 + 3 * u * u * t * g.y1 + 3 * u * t * t * g.y2 + t ** 3 * g.y2;
  return { x, y };
}

// --- sparklines: the last rounds of an instance's token rate (prompt tok/s for Prefill, generation for Decode) ---

const SPARK_W = 64;
const SPARK_H = 12;
const SPARK_FIELD = { prefill: "prompt_tok_s", decode: "gen_tok_s" };
const HISTORY_LEN = 60;
// Rounds seen by this page, for a field the server's history does not carry (yet): then the line starts empty
// and grows with each round pushed over the websocket.
const seenRounds = [];

function remember(live) {
  if (!live || seenRounds.at(-1)?.at === live.at) return;
  const values = {};
  for (const [name, v] of Object.entries(live.instances)) values[name] = { prompt_tok_s: v.prompt_tok_s, gen_tok_s: v.gen_tok_s };
  seenRounds.push({ at: live.at, values });
  if (seenRounds.length > HISTORY_LEN) seenRounds.shift();
}

// A round pushes only its own sparkline values (history_point): appended to the series the snapshot brought.
function appendRound(history, point) {
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

function sparkSeries(live, name, field) {
  const fromServer = live.history?.instances?.[name];
  if (fromServer && field in fromServer) return fromServer[field];
  return seenRounds.map((r) => r.values[name]?.[field] ?? null);
}

// A polyline of the rounds with a value (gaps are skipped, not drawn as zero), scaled to the series' own maximum;
// null when fewer than two rounds have one.
function sparkline(parent, x, y, series, label) {
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

const pct = (v) => (v === null || v === undefined ? "—" : `${Math.round(v * 100)}%`);
const sumOf = (vals) => {
  const known = vals.filter((v) => v !== null && v !== undefined);
  return known.length ? known.reduce((a, b) => a + b, 0) : null;
};

function finishText(success, rates) {
  const reasons = Object.keys(success ?? {}).sort();
  if (!reasons.length) return "—";
  return reasons.map((r) => `${r} ${num(success[r])}${rates && rates[r] !== undefined ? ` (${fmtRate(rates[r], "/s")})` : ""}`).join(", ");
}

function liveRowY(b) {
  return b.frame ? b.y + FRAME_HEAD : b.y + b.h - liveHeight(b.inst) - 2;
}

function poolRowY(b) {
  if (!b.inst || !liveRows || !poolOf.has(b.inst.id)) return null;
  return liveRowY(b) + LIVE_ROW;
}

// The instance's row for the KV pool, where its edge to the pool starts: the KV connector's hit rate and the
// tokens it found there (vLLM's external_prefix_cache_*), and simcluster's blocks found / put per second.
function drawPoolRow(layer, b, v, live) {
  const y = poolRowY(b);
  const g = el("g", { class: "live-pool", "data-instance": b.inst.name }, layer);
  const parts = [];
  let tipText = `${b.inst.name} and the KV pool`;
  if (v && (v.status === "ok" || v.status === "partial")) {
    // vLLM's external_prefix_cache_*: on a Prefill, the pool's lookups; on a Decode mostly the KV pulled from
    // Prefill, so there only simcluster's pool blocks count.
    const prefill = b.inst.role === "prefill";
    const rate = v.connector_hit_rate ?? v.connector_hit_rate_total;
    if (prefill && rate !== null && rate !== undefined) {
      parts.push(`${pct(rate)} hit${v.connector_hit_rate === null || v.connector_hit_rate === undefined ? " (since start)" : ""}`);
    }
    if (prefill && v.connector_hit_tok_s) parts.push(fmtRate(v.connector_hit_tok_s, "tok/s"));
    const tiers = Object.values(v.store_blocks ?? {});
    const load = sumOf(tiers.map((t) => t.load_s)), put = sumOf(tiers.map((t) => t.backup_s));
    if (load !== null || put !== null) parts.push(`${fmtRate(load, "in")} / ${fmtRate(put, "put blk/s")}`);
    tipText += `\nKV connector lookups${prefill ? " (the pool)" : " (KV pulled from Prefill, and pool loads if any)"}: `
      + `${pct(v.connector_hit_rate)} hit in the window, ${pct(v.connector_hit_rate_total)} since start, `
      + `${fmtRate(v.connector_hit_tok_s, "tok/s")} found`
      + Object.entries(v.store_blocks ?? {}).map(([tier, t]) => `\n${tier}: ${num(t.load)} blocks found (${fmtRate(t.load_s, "/s")}), `
        + `${num(t.backup)} put (${fmtRate(t.backup_s, "/s")})`).join("");
  }
  const mode = poolOf.get(b.inst.id);
  const read = v && (v.status === "ok" || v.status === "partial");
  const idle = mode === "holds pool memory" ? "pool: only lends it memory (no load, no put)"
    : !read ? "pool: —"
      : b.inst.role === "decode" ? `pool: ${mode} (its connector counts mix in the KV from Prefill)`
        : "pool: no figures (the engines export none)";
  const str = parts.length ? `pool: ${parts.join(" · ")}` : idle;
  if (mode) tipText += `\n(${b.inst.role}: ${mode})`;
  const line = text(g, b.x + 8, y + 11, str, { class: `live-text live-pool-text${parts.length ? "" : " muted"}` });
  while (textWidth(line) > b.w - 16 && parts.length > 1) {
    parts.pop();
    line.textContent = `pool: ${parts.join(" · ")}`;
  }
  tip(g, tipText);
}

// Under the pool's box: what the master holds (keys, bytes used of what the mounted segments lend, how many segments
// on how many hosts), or why it cannot say (master unreachable, page garbled, no segment mounted); then the
// Prefills' hit rate and the master's lookups/loads/puts per second.
function drawPoolService(layer, b, v, live) {
  const g = el("g", { class: "live-pool-service", "data-key": b.service.key }, layer);
  const cls = `edge-label live-service${v.status !== "ok" ? " bad" : ""}`;
  if (v.status !== "ok") {
    const why = v.status === "unreachable" ? "master unreachable" : `master's page ${v.status}`;
    g.dataset.state = v.status;
    label(g, b.x + 4, b.y + b.h + 15, `${why}: ${v.reason}`.slice(0, 80), "start", cls);
    tip(g, `${b.service.key}: ${why}\n${v.reason}`);
    return;
  }
  const gb = (x) => fmtBytes(x).replace("/s", "");
  const plural = (n, word) => `${num(n)} ${word}${Math.round(n) === 1 ? "" : "s"}`;
  const share = (x) => (x === null || x === undefined ? "" : x > 0 && x < 0.01 ? " (<1%)" : ` (${pct(x)})`);
  const hosts = Object.entries(v.segment_hosts ?? {});
  // A master page from before segments were read says nothing of them: judged by its capacity alone.
  const empty = v.empty_reason ?? (v.total_bytes ? "" : "no segment mounted");
  const mounted = v.segments === null || v.segments === undefined ? plural(v.active_clients, "client")
    : `${plural(v.segments, "segment")}${hosts.length ? ` on ${plural(hosts.length, "host")}` : ""}`;
  g.dataset.state = empty ? "empty" : "ok";
  label(g, b.x + 4, b.y + b.h + 15, empty || `${num(v.key_count)} keys · ${gb(v.allocated_bytes)} of `
    + `${gb(v.total_bytes)} used${share(v.used)} · ${mounted}`, "start", `${cls} live-pool-held${empty ? " muted" : ""}`);
  // The hit rate is the Prefills' (their KV connector's lookups): the master cannot tell a hit from a miss.
  const summary = live.pool ?? {};
  const hit = summary.hit_rate ?? summary.hit_rate_total;
  const hits = hit === null || hit === undefined ? ""
    : `hits ${pct(hit)}${summary.hit_rate === null || summary.hit_rate === undefined ? " since start" : ""} · `;
  const second = v.note && !empty ? v.note
    : `${hits}${fmtRate(v.lookup_s, "lookups/s")} · ${fmtRate(v.load_s, "loads/s")} · ${fmtRate(v.put_s, "puts/s")}`;
  label(g, b.x + 4, b.y + b.h + 30, second, "start", `${cls} live-pool-hits`);
  const lent = hosts.map(([host, h]) => `\n  ${host}: ${plural(h.segments, "segment")}, ${gb(h.allocated_bytes)} of ${gb(h.total_bytes)}`);
  tip(g, `${b.service.key}: ${empty || `${num(v.key_count)} keys in ${gb(v.allocated_bytes)} of ${gb(v.total_bytes)}`}`
    + `; ${plural(v.active_clients, "store client")} connected${lent.length ? `, segments lent by${lent.join("")}` : ""}`
    + `\nsince it started ${num(v.lookups)} keys looked up, ${num(v.loads)} loaded `
    + `(${num(v.load_failures)} not found), ${num(v.puts)} put, ${num(v.evicted_keys)} evicted`
    + `\nhit rate: the Prefills' KV-connector lookups, ${pct(summary.hit_rate)} in the window, ${pct(summary.hit_rate_total)} since start`);
}

function drawLive(live) {
  if (!svgNow) return;
  paintHealth(live);
  remember(live);
  svgNow.querySelector(".live-layer")?.remove();
  for (const { g, line } of kvGeometry.values()) {
    g.classList.remove("busy", "idle");
    line.style.strokeWidth = "";
    line.setAttribute("marker-end", "url(#arrow-kv)");
  }
  if (!live) return;
  // Built detached and attached once: the browser lays the picture out once per update, not once per element.
  const layer = el("g", { class: `live-layer${live.stale ? " stale" : ""}`, "data-at": live.at });
  for (const [id, b] of boxesNow) {
    if (!b.inst) continue;
    const v = live.instances[b.inst.name];
    const y = liveRowY(b);
    if (poolRowY(b) !== null) drawPoolRow(layer, b, v, live);
    const g = el("g", { class: "live-instance", "data-instance": b.inst.name }, layer);
    if (!v) {
      text(g, b.x + 8, y + 13, "no live data (not scraped)", { class: "live-text muted" });
      continue;
    }
    if (v.status !== "ok" && v.status !== "partial") {
      text(g, b.x + 8, y + 13, `metrics ${v.status}: ${v.reason}`.slice(0, 70), { class: "live-text bad" });
      tip(g, `${b.inst.name}: ${v.reason}`);
      continue;
    }
    // KV cache usage bar and its percentage, then as many of the numbers as fit (all of them in the hover).
    const usage = v.kv_usage ?? 0;
    el("rect", { x: b.x + 8, y: y + 4, width: 40, height: 9, rx: 2, class: "kv-bar-bg" }, g);
    el("rect", { x: b.x + 8, y: y + 4, width: Math.max(0, Math.min(1, usage)) * 40, height: 9, rx: 2,
      class: `kv-bar${usage > 0.9 ? " full" : usage > 0.7 ? " high" : ""}` }, g);
    text(g, b.x + 52, y + 13, v.kv_usage === null ? "—" : `${Math.round(usage * 100)}%`, { class: "live-text" });
    const role = b.inst.role;
    const parts = [`run ${num(v.running)} wait ${num(v.waiting)}`,
      role === "prefill" ? `${fmtRate(v.prompt_tok_s, "tok/s")} in` : `${fmtRate(v.gen_tok_s, "tok/s")} out`,
      `TTFT ${fmtMs(v.ttft_s)}`];
    if (role === "decode") parts.push(`ITL ${fmtMs(v.itl_s)}`);
    const prefix = v.prefix_hit_rate ?? v.prefix_hit_rate_total;
    if (prefix !== null && prefix !== undefined) parts.push(`prefix ${pct(prefix)}`);
    if (v.preempt_s) parts.push(`preempt ${fmtRate(v.preempt_s, "/s")}`);
    if (v.status === "partial") parts.unshift(`${v.reachable}/${v.processes} read`);
    const field = SPARK_FIELD[role];
    const spark = field && sparkline(g, b.x + b.w - SPARK_W - 8, y + 2, sparkSeries(live, b.inst.name, field),
      `${b.inst.name} ${role === "prefill" ? "prompt" : "generation"} tok/s`);
    const room = b.w - 92 - (spark ? SPARK_W + 10 : 0);
    const line = text(g, b.x + 84, y + 13, parts.join(" · "), { class: `live-text${v.status === "partial" ? " warn" : ""}` });
    while (parts.length > 1 && textWidth(line) > room) {
      parts.pop();
      line.textContent = parts.join(" · ");
    }
    tip(g, `${b.inst.name} live (${live.stale ? "stale, " : ""}read ${Math.round(live.age_s)} s ago)\n`
      + `KV cache usage ${v.kv_usage === null ? "—" : `${(usage * 100).toFixed(1)}%`} (fullest rank)\n`
      + `running ${num(v.running)} · waiting ${num(v.waiting)}\nprompt ${fmtRate(v.prompt_tok_s, "tok/s")} · generation ${fmtRate(v.gen_tok_s, "tok/s")}`
      + `\nTTFT ${fmtMs(v.ttft_s)} · ITL ${fmtMs(v.itl_s)} (means over the last ${live.interval_s ? Math.round(live.interval_s) : "—"} s)`
      + `\nprefix cache hits ${pct(v.prefix_hit_rate)} in the window, ${pct(v.prefix_hit_rate_total)} since start`
      + `\npreemptions ${num(v.preemptions)}${v.preempt_s !== null && v.preempt_s !== undefined ? ` (${fmtRate(v.preempt_s, "/s")})` : ""}`
      + `\nfinished: ${finishText(v.success, v.success_s)}`
      + `${v.reason ? `\n${v.reason}` : ""}`);
  }
  // The proxy's client rate under the client arrow; the pool's fill under its box.
  for (const [key, v] of Object.entries(live.services)) {
    const b = boxesNow.get(processEnd(key));
    if (!b || !b.service) continue;
    if (b.service.role === "kv_pool") {
      drawPoolService(layer, b, v, live);
      continue;
    }
    let str;
    if (v.status !== "ok") str = `metrics ${v.status}: ${v.reason}`.slice(0, 60);
    else if (b.service.role === "proxy") str = `${fmtRate(v.req_s, "req/s")} · TTFT ${fmtMs(v.ttft_s)}`;
    else continue;
    const at = b.service.role === "proxy" ? { x: boxesNow.get("client").x + boxesNow.get("client").w / 2 + 8, y: b.nodeBox.y - 12 }
      : { x: b.x + 4, y: b.y + b.h + 15 };
    label(layer, at.x, at.y, str, "start", `edge-label live-service${v.status !== "ok" ? " bad" : ""}`);
  }
  // A pool nobody scrapes (MemCache's MetaService, the simulated memcached ring): what the engines say they found
  // and put there.
  const unread = [...boxesNow.entries()].filter(([id, b]) => id === "group:store"
    || (b.service?.role === "kv_pool" && b.service.backend === "memcache" && !live.services[b.service.key]));
  for (const [id, b] of unread) {
    if (!live.pool) break;
    const t = Object.values(live.pool.tiers ?? {});
    const load = sumOf(t.map((x) => x.load_s)), put = sumOf(t.map((x) => x.backup_s));
    const g = el("g", { class: "live-pool-service", "data-id": id }, layer);
    const hit = live.pool.hit_tok_s;
    const parts = [];
    if (load !== null || put !== null) parts.push(`${fmtRate(load, "blocks/s")} found · ${fmtRate(put, "blocks/s")} put`);
    if (hit !== null && hit !== undefined) parts.push(`${fmtRate(hit, "tok/s")} hit`);
    label(g, b.x + 4, b.y + b.h + 15, parts.length ? `engines: ${parts.join(" · ")}` : "not read (no metrics format known); "
      + "the engines export no pool figures", "start", `edge-label live-service${parts.length ? "" : " muted"}`);
    tip(g, "the pool's own metrics are not read here; these are the engines' counters summed over instances");
  }
  // KV hand-over edges: thickness from KV bytes/s relative to the busiest edge, a label where there is traffic.
  // An edge the round did not send carried nothing. Into/out of the fabric: the instance's total over its pairs.
  const flowOf = (id, geo) => (geo.fabric ? live.kv_fabric?.[geo.fabric.name]?.[geo.fabric.side] : live.edges[id]);
  let top = 0;
  for (const [id, geo] of kvGeometry) top = Math.max(top, flowOf(id, geo)?.kv_bytes_s ?? 0);
  const labelled = [];
  for (const [id, geo] of kvGeometry) {
    const e = flowOf(id, geo);
    const flow = e?.kv_bytes_s ?? 0;
    const { line } = geo;
    if (!e || !flow) { geo.g.classList.add("idle"); continue; }
    if (geo.fabric) {
      geo.g.classList.add("busy");
      line.style.strokeWidth = `${1.5 + 6.5 * Math.sqrt(flow / top)}`;
      line.setAttribute("marker-end", "url(#arrow-kvflow)");
      fabricLabel(layer, geo, e);
      continue;
    }
    geo.g.classList.add("busy");
    line.style.strokeWidth = `${1.5 + 6.5 * Math.sqrt(flow / top)}`;
    line.setAttribute("marker-end", "url(#arrow-kvflow)");
    // Labels mid-way, nudged down while they would overlap one already placed.
    let p = bezierAt(geo, 0.5);
    while (labelled.some((q) => Math.abs(q.y - p.y) < 13 && Math.abs(q.x - p.x) < 120)) p = { x: p.x, y: p.y + 13 };
    labelled.push(p);
    const lbl = label(layer, p.x, p.y - 4, `${fmtRate(e.req_s, "req/s")} · ${fmtBytes(flow)}`, "middle", "edge-label kv live-flow");
    const check = e.engine_kv_bytes_s !== null && e.engine_kv_bytes_s !== undefined
      ? `\nengines' own counters: ${fmtBytes(e.engine_kv_bytes_s)}` : "\n(no engine transfer counters: vllm-ascend exports none)";
    tip(lbl, `${kvEdgeInstances(id).join("->")}: ${fmtRate(e.req_s, "req/s")}, ${fmtRate(e.prompt_tok_s, "prompt tok/s")}\n`
      + `KV ${fmtBytes(flow)} from ${e.source_label}${check}\n${num(e.requests)} hand-overs since the proxy started`);
  }
  svgNow.appendChild(layer);
}

function fabricLabel(layer, geo, f) {
  const out = geo.fabric.side === "out";
  const lbl = label(layer, out ? geo.x1 + 6 : geo.x2 - 10, geo.y1 - 4, `${fmtRate(f.req_s, "req/s")} · ${fmtBytes(f.kv_bytes_s)}`,
    out ? "start" : "end", "edge-label kv live-flow");
  lbl.dataset.instance = geo.fabric.name;
  const peers = (f.peers ?? []).map(([peer, bytes, req]) => `\n  ${out ? "→" : "←"} ${peer}: ${fmtBytes(bytes)}, ${fmtRate(req, "req/s")}`);
  tip(lbl, `${geo.fabric.name} KV ${out ? "out to" : "in from"} ${f.pairs} busy peer${f.pairs === 1 ? "" : "s"}: `
    + `${fmtBytes(f.kv_bytes_s)}, ${fmtRate(f.req_s, "req/s")}\nbusiest:${peers.join("")}`);
}

// --- health (apps/telemetry/health, docs/health-policy.md) -----------------------------------------------------
// Each round's health section names every instance and service process's state; it colours and labels their boxes
// in place, over the process state the snapshot drew (which only a job changes).

function instanceLink(parent, name) {
  const id = current?.deployment?.id;
  if (id === undefined) return parent;
  return el("a", { href: `/deployments/${id}/instances/${encodeURIComponent(name)}/`, class: "instance-link" }, parent);
}

// The boxes health paints, found once per drawing (by reference after that), each with the last paint's key.
let healthBoxes = null;

function healthTargets() {
  const instances = new Map((current?.instances ?? []).map((i) => [i.name, i]));
  const services = new Map((current?.services ?? []).map((s) => [s.key, s]));
  const out = [];
  for (const g of svgNow.querySelectorAll(".topo-instance[data-instance], .topo-service[data-key]")) {
    const id = g.dataset.instance ?? g.dataset.key;
    const obj = g.dataset.instance !== undefined ? instances.get(id) : services.get(id);
    if (!obj) continue;
    const title = g.querySelector(":scope > title");
    out.push({ g, id, obj, box: g.querySelector(":scope > rect"), dot: g.querySelector(":scope > circle"),
      label: g.querySelector(":scope > .state-label"), title, base: title?.textContent, painted: null });
  }
  return out;
}

function paintHealth(live) {
  const health = live?.health ?? {};
  healthBoxes ??= healthTargets();
  for (const t of healthBoxes) {
    const h = health[t.id];
    const key = h ? `${h.state}|${h.colour}|${h.label}|${h.since}|${h.reason}|${h.restarts}|${h.restart_job}` : "";
    if (key === t.painted) continue; // unchanged since the last round: nothing to touch
    t.painted = key;
    const { colour, tint } = h ? { colour: COLOUR[h.colour] || COLOUR.grey, tint: TINT[h.colour] || TINT.grey } : stateStyle(t.obj);
    t.box?.setAttribute("stroke", colour);
    t.box?.setAttribute("fill", tint);
    t.dot?.setAttribute("fill", colour);
    if (t.label) {
      t.label.textContent = h ? h.label : t.obj.state_label;
      t.label.setAttribute("fill", colour);
    }
    if (t.title) {
      t.title.textContent = t.base + (!h ? "" : `\nhealth: ${h.label} since ${new Date(h.since * 1000).toLocaleTimeString()}`
        + `${h.reason ? ` — ${h.reason}` : ""}${h.restarts ? `\nauto-restarts since it was last healthy: ${h.restarts}` : ""}`
        + `${h.restart_job ? ` (job #${h.restart_job})` : ""}`);
    }
    t.g.dataset.health = h ? h.state : "none";
  }
}

function liveStatus(live) {
  if (!live) return "live: no scrape yet";
  const bad = live.targets.filter((t) => t.status !== "ok");
  return `live ${live.stale ? "STALE, " : ""}read ${new Date(live.at * 1000).toLocaleTimeString()}`
    + (bad.length ? ` · ${bad.length} of ${live.targets.length} targets not read: ${bad.map((t) => `${t.key} ${t.status}`).join(", ")}` : "");
}

function showProblems(snapshot) {
  const box = root.querySelector(".topology-problems");
  box.replaceChildren();
  if (!snapshot.problems.length) { box.hidden = true; return; }
  box.hidden = false;
  const head = document.createElement("p");
  head.textContent = snapshot.nodes.length
    ? "The active revision does not validate now; drawn as planned with every die counted healthy:"
    : snapshot.revision ? "The active revision cannot be planned:" : "No active revision:";
  const list = document.createElement("ul");
  for (const p of snapshot.problems) {
    const li = document.createElement("li");
    li.textContent = `${p.instance ? `${p.instance}: ` : ""}${p.message}${p.suggestion ? ` — ${p.suggestion}` : ""}`;
    list.appendChild(li);
  }
  box.append(head, list);
}

let lastBody = "";
let timer = null;
let current = null;
let socketOpened = false;
let early = null; // the newest round pushed before the first snapshot arrived

async function refresh() {
  const status = root.querySelector(".topology-status");
  let snapshot;
  try {
    const resp = await fetch(root.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    const body = await resp.text();
    snapshot = JSON.parse(body);
    // A round pushed while this was read (or before the first read) is newer than the snapshot's: keep it.
    const pushed = current ? current.live : early;
    early = null;
    const newer = pushed && (!snapshot.live || pushed.at > snapshot.live.at);
    if (newer) snapshot.live = { ...pushed, history: appendRound(snapshot.live?.history, pushed.history_point) };
    current = snapshot;
    if (newer || body !== lastBody) {
      lastBody = body;
      showProblems(snapshot);
      draw(snapshot);
    }
  } catch (err) {
    status.textContent = `could not load the topology (${err.message}); retrying`;
    timer = setTimeout(refresh, POLL_MS * 2);
    return;
  }
  const job = snapshot.active_job;
  const when = new Date().toLocaleTimeString();
  const rev = snapshot.revision ? `r${snapshot.revision.number}` : "no revision";
  status.textContent = `${rev}${snapshot.profile ? ` · ${snapshot.profile}` : ""} · read ${when}`
    + (job ? ` · job #${job.id} (${job.kind}) ${job.status}: refreshing every ${POLL_MS / 1000} s` : "");
  root.querySelector(".topology-live").textContent = liveStatus(snapshot.live);
  if (!socketOpened) connectLive(snapshot.deployment.id);
  root.dataset.state = job ? "watching" : "idle";
  root.dataset.loaded = "1";
  clearTimeout(timer);
  if (job) timer = setTimeout(refresh, POLL_MS);
}

// Each scrape round arrives here; only the live layer is redrawn (the whole picture when its row first appears).
// Opened beside the first read of the snapshot, so no round falls between the two; after a close it opens again
// and reads the snapshot anew, for what was pushed while it was closed.
function connectLive(deploymentId) {
  socketOpened = true;
  liveSocket(`/ws/deployments/${deploymentId}/`, { root, onMessage: onRound, onOpen: ({ reopened }) => reopened && refresh() });
}

function onRound(msg) {
  if (msg.type !== "live") return;
  if (!current) {
    if (msg.live && (!early || msg.live.at > early.at)) early = msg.live;
    return;
  }
  if (msg.live) msg.live.history = appendRound(current.live?.history, msg.live.history_point);
  current.live = msg.live;
  if (Boolean(msg.live) !== liveRows) draw(current);
  else drawLive(msg.live);
  root.querySelector(".topology-live").textContent = liveStatus(msg.live);
  root.dataset.liveAt = `${msg.live.at}`;
}

if (root) {
  const deploymentId = root.dataset.url.match(/\/deployments\/(\d+)\//)?.[1];
  if (deploymentId) connectLive(deploymentId);
  refresh();
  // Back from the job page, or a tab left open: read again when the page is shown.
  document.addEventListener("visibilitychange", () => { if (!document.hidden && root.dataset.state !== "watching") refresh(); });
}
