// The playground page (templates/deployments/playground.html): POSTs one request, reads the server-sent events
// (meta, delta, done, error) as they stream, keeps the chat's history in the page.
import { kvEdgeId } from "./edge-ids.js";

const root = document.getElementById("playground");
const form = document.getElementById("pg-form");
const $ = (id) => document.getElementById(id);
const history = []; // chat turns: {role, content, served?}; served (an answer's P, D and TTFT) is never sent
const requests = []; // this page's requests, newest first: what the request log table shows
let updates = 0;

function field(name) { return form.elements[name]; }
function kind() { return form.querySelector("input[name=kind]:checked").value; }
function csrf() { return field("csrfmiddlewaretoken").value; }
function served(s) { return s ? (s.key ? `${s.instance || s.key} (${s.key}, ${s.address})` : s.address) : "—"; }
function short(s) { return s ? (s.key || s.address) : "?"; }
function ms(v) { return v === null || v === undefined ? "—" : `${v.toFixed(1)} ms`; }

function drawHistory() {
  const box = $("pg-history");
  box.replaceChildren(...history.map((t) => {
    const div = document.createElement("div");
    div.className = "pg-turn";
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = t.role;
    div.append(who, document.createTextNode(t.content));
    if (t.served) {
      const tag = document.createElement("span");
      tag.className = "muted pg-served";
      tag.textContent = ` — ${t.served}`;
      div.append(tag);
    }
    return div;
  }));
}

function body(text) {
  const out = { kind: kind(), max_tokens: Number(field("max_tokens").value),
                temperature: Number(field("temperature").value), stream: field("stream").checked };
  if (out.kind === "chat") out.messages = [...history.map(({ role, content }) => ({ role, content })), { role: "user", content: text }];
  else out.prompt = text;
  return out;
}

function showError(message) {
  const box = $("pg-error");
  box.textContent = message;
  box.hidden = false;
}

async function edgeCount(prefill, decode) {
  if (!prefill || !decode || !prefill.instance || !decode.instance) return;
  try {
    const r = await fetch(root.dataset.topologyUrl, { headers: { Accept: "application/json" } });
    if (!r.ok) return;
    const snap = await r.json();
    const e = ((snap.live || {}).edges || {})[kvEdgeId(prefill.instance, decode.instance)];
    $("pg-edge").textContent = e && e.requests !== undefined ? `${Math.round(e.requests)} (last telemetry round)` : "not scraped yet";
  } catch (_) { /* the figure is optional */ }
}

function onEvent(name, data, state) {
  if (name === "meta") {
    $("pg-rid").textContent = data.request_id;
    $("pg-prefill").textContent = served(data.prefill);
    $("pg-decode").textContent = served(data.decode) + (data.retries ? ` · ${data.retries} retried` : "");
    $("pg-raw-request").textContent = JSON.stringify(data.request.body, null, 2);
    $("pg-curl").textContent = data.request.curl;
    $("pg-python").textContent = data.request.python;
    state.meta = data;
  } else if (name === "delta") {
    state.text += data.text;
    $("pg-answer-box").textContent = state.text;
    updates += 1;
    root.dataset.updates = String(updates);
  } else if (name === "done" || name === "error") {
    $("pg-ttft").textContent = ms(data.ttft_ms);
    $("pg-itl").textContent = `${ms(data.itl_p50_ms)} / ${ms(data.itl_mean_ms)}`;
    $("pg-total").textContent = ms(data.total_ms);
    $("pg-tokens").textContent = `${data.tokens_in ?? "—"} / ${data.tokens_out ?? "—"}`;
    $("pg-raw-response").textContent = data.raw_response || "";
    if (name === "error") showError(data.message);
    state.end = name;
    state.figures = data;
    if (state.meta) edgeCount(state.meta.prefill, state.meta.decode);
  }
}

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text;
  return td;
}

function logRequest(kindName, state) {
  const m = state.meta || {}, f = state.figures || {};
  requests.unshift({ rid: m.request_id || "—", kind: kindName, prefill: short(m.prefill), decode: short(m.decode),
                     ttft: ms(f.ttft_ms), itl: ms(f.itl_p50_ms), tokens: `${f.tokens_in ?? "—"} / ${f.tokens_out ?? "—"}`,
                     outcome: state.end === "done" ? "ok" : (f.status || "failed") });
  if (requests.length > 50) requests.length = 50;
  $("pg-log").hidden = false;
  $("pg-log-rows").replaceChildren(...requests.map((q) => {
    const tr = document.createElement("tr");
    tr.append(...[q.rid, q.kind, q.prefill, q.decode, q.ttft, q.itl, q.tokens, q.outcome].map(cell));
    return tr;
  }));
}

async function send(event) {
  event.preventDefault();
  const text = $("pg-text").value;
  const payload = body(text);
  $("pg-error").hidden = true;
  $("pg-answer-box").textContent = "";
  for (const id of ["pg-ttft", "pg-itl", "pg-total", "pg-tokens", "pg-prefill", "pg-decode", "pg-rid", "pg-edge"]) $(id).textContent = "—";
  $("pg-raw-request").textContent = JSON.stringify(payload, null, 2);
  updates = 0;
  root.dataset.state = "sending";
  $("pg-send").disabled = true;
  $("pg-status").textContent = "sending…";
  const state = { text: "", meta: null, end: null };
  try {
    const r = await fetch(root.dataset.url, { method: "POST", body: JSON.stringify(payload),
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf(), Accept: "text/event-stream" } });
    if (!r.ok) {
      let detail = `HTTP ${r.status}`;
      try { detail = (await r.json()).detail || detail; } catch (_) { /* not JSON */ }
      showError(detail);
      state.end = "error";
    } else {
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let name = "message", data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("event: ")) name = line.slice(7);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (data) onEvent(name, JSON.parse(data), state);
        }
      }
    }
  } catch (exc) {
    showError(`the request failed: ${exc}`);
    state.end = "error";
  }
  logRequest(payload.kind, state);
  if (state.end === "done" && payload.kind === "chat") {
    const m = state.meta || {};
    const servedBy = `${short(m.prefill)} → ${short(m.decode)} · TTFT ${ms((state.figures || {}).ttft_ms)}`;
    history.push({ role: "user", content: text }, { role: "assistant", content: state.text, served: servedBy });
    drawHistory();
    $("pg-text").value = "";
  }
  root.dataset.state = state.end || "error";
  $("pg-status").textContent = state.end === "done" ? `done (${updates} updates)` : "failed";
  $("pg-send").disabled = false;
}

form.addEventListener("submit", send);
$("pg-clear").addEventListener("click", () => { history.length = 0; drawHistory(); });
