// Where each box of the picture goes (no drawing): node boxes in columns by stage (client/proxy | Prefill nodes |
// Decode nodes), the KV pool and store in a band below. An instance on one node is a box inside its node box. An
// instance that spans nodes is a frame around its node boxes (labelled with its name and "TP x DP over n nodes", live
// load in its head), and inside each node box a slice: that node's ranks (one row each while few, else one summary
// row), headless ones dashed.
import { picture } from "./state.js";

export const WIDTH = 1350;
export const COLUMNS = {
  front: { x: 16, w: 220 },
  prefill: { x: 336, w: 380 },
  decode: { x: 904, w: 410 },
};
export const CELL_H = 26;
export const RANK_ROW = 17;
const LIVE_ROW = 18;
const FRAME_HEAD = 22;
const FRAME_PAD = 8;
const POOL_ROW = 15;
export const SLICE_HEAD = 20;
export const MAX_RANK_ROWS = 4; // more ranks than this on one node: one summary row (each rank stays in the hover)

export const rankNode = (inst, r) => r.node ?? inst.node;
const spans = (inst) => (inst.nodes?.length ?? 1) > 1;

export function liveHeight(inst) {
  return picture.liveRows ? LIVE_ROW + (picture.poolOf.has(inst.id) ? POOL_ROW : 0) : 0;
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

export function frameHead(inst) {
  return FRAME_HEAD + liveHeight(inst) + 2;
}

// What a node box holds, in drawing order: whole instances, and slices of instances that span nodes.
export function hostedParts(node, snapshot) {
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

export function layout(snapshot) {
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

export function liveRowY(b) {
  return b.frame ? b.y + FRAME_HEAD : b.y + b.h - liveHeight(b.inst) - 2;
}

export function poolRowY(b) {
  if (!b.inst || !picture.liveRows || !picture.poolOf.has(b.inst.id)) return null;
  return liveRowY(b) + LIVE_ROW;
}
