// The boxes: each node with its NPU dies and what it hosts, instances (a box, or a frame and a slice per node when
// they span nodes) with a row per DP rank, the proxy, and the band of the KV pool and its store.
import { ranges, windowText } from "./format.js";
import { CELL_H, MAX_RANK_ROWS, RANK_ROW, SLICE_HEAD, hostedParts, rankNode } from "./layout.js";
import { COLOUR, stateStyle } from "./palette.js";
import { picture } from "./state.js";
import { el, text, textWidth, tip } from "./svg.js";

export function drawNode(svg, box, snapshot, colours) {
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
  const b = picture.boxes.get(inst.id);
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
export function drawFrame(svg, f) {
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

export function drawService(parent, s, b, label) {
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

export function drawBand(svg, lay, snapshot) {
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

// An instance's box is a link to its page.
function instanceLink(parent, name) {
  const id = picture.snapshot?.deployment?.id;
  if (id === undefined) return parent;
  return el("a", { href: `/deployments/${id}/instances/${encodeURIComponent(name)}/`, class: "instance-link" }, parent);
}
