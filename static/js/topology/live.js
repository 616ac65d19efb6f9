// The live layer, redrawn on every scrape round (apps.telemetry): each instance's KV usage, rates and latencies and
// its row for the KV pool, the proxy's client rate, what the pool holds, and the KV flow on each P -> D edge.
import { kvEdgeInstances, processEnd } from "../edge-ids.js";
import { bezierAt } from "./edges.js";
import { finishText, fmtBytes, fmtMs, fmtRate, num, pct, sumOf } from "./format.js";
import { paintHealth } from "./health.js";
import { liveRowY, poolRowY } from "./layout.js";
import { SPARK_FIELD, SPARK_W, remember, sparkSeries, sparkline } from "./sparklines.js";
import { picture } from "./state.js";
import { el, label, text, textWidth, tip } from "./svg.js";

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
  const mode = picture.poolOf.get(b.inst.id);
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

export function drawLive(live) {
  if (!picture.svg) return;
  paintHealth(live);
  remember(live);
  picture.svg.querySelector(".live-layer")?.remove();
  for (const { g, line } of picture.kvGeometry.values()) {
    g.classList.remove("busy", "idle");
    line.style.strokeWidth = "";
    line.setAttribute("marker-end", "url(#arrow-kv)");
  }
  if (!live) return;
  // Built detached and attached once: the browser lays the picture out once per update, not once per element.
  const layer = el("g", { class: `live-layer${live.stale ? " stale" : ""}`, "data-at": live.at });
  for (const [id, b] of picture.boxes) {
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
    const b = picture.boxes.get(processEnd(key));
    if (!b || !b.service) continue;
    if (b.service.role === "kv_pool") {
      drawPoolService(layer, b, v, live);
      continue;
    }
    let str;
    if (v.status !== "ok") str = `metrics ${v.status}: ${v.reason}`.slice(0, 60);
    else if (b.service.role === "proxy") str = `${fmtRate(v.req_s, "req/s")} · TTFT ${fmtMs(v.ttft_s)}`;
    else continue;
    const at = b.service.role === "proxy" ? { x: picture.boxes.get("client").x + picture.boxes.get("client").w / 2 + 8, y: b.nodeBox.y - 12 }
      : { x: b.x + 4, y: b.y + b.h + 15 };
    label(layer, at.x, at.y, str, "start", `edge-label live-service${v.status !== "ok" ? " bad" : ""}`);
  }
  // A pool nobody scrapes (MemCache's MetaService, the simulated memcached ring): what the engines say they found
  // and put there.
  const unread = [...picture.boxes.entries()].filter(([id, b]) => id === "group:store"
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
  for (const [id, geo] of picture.kvGeometry) top = Math.max(top, flowOf(id, geo)?.kv_bytes_s ?? 0);
  const labelled = [];
  for (const [id, geo] of picture.kvGeometry) {
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
  picture.svg.appendChild(layer);
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
