// Live eval run page: subscribe to the socket first, then read the current state once; when the run ends the
// page reloads, and a finished run's page is rendered whole by the server (it loads no socket at all).
import { liveSocket } from "./live-socket.js";

const root = document.getElementById("evalrun");
const runId = root.dataset.runId;
const wsState = document.getElementById("ws-state");
const RANK = { pending: 0, running: 1, succeeded: 2, failed: 2, canceled: 2 };
let shown = { rank: RANK[root.dataset.status] ?? 0, done: -1 };
let startedAt = null; // when the run started, in this browser's clock
let finished = root.dataset.finished === "1";

function duration(seconds) {
  if (seconds == null || !Number.isFinite(seconds)) return "—";
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (h) return `${h}h ${String(m).padStart(2, "0")}m`;
  return m ? `${m}m ${String(sec).padStart(2, "0")}s` : `${sec}s`;
}

function isOlder(msg) {
  const rank = RANK[msg.status] ?? 0;
  return rank < shown.rank || (rank === shown.rank && msg.done < shown.done);
}

function apply(msg) {
  if (msg.type !== "eval" || String(msg.id) !== runId || isOlder(msg)) return;
  shown = { rank: RANK[msg.status] ?? 0, done: msg.done };
  root.dataset.status = msg.status;
  const badge = document.getElementById("run-status");
  badge.textContent = msg.status_label;
  badge.className = `badge ${msg.colour}`;
  const fill = document.getElementById("progress-fill");
  fill.style.width = `${msg.percent}%`;
  fill.className = `bar-fill ${msg.colour}`;
  document.getElementById("progress-count").textContent = `${msg.done} / ${msg.total || "?"}`;
  document.getElementById("progress-phase").textContent = msg.phase || "";
  startedAt = msg.elapsed_s == null ? null : Date.now() - msg.elapsed_s * 1000;
  document.getElementById("progress-elapsed").textContent = duration(msg.elapsed_s);
  const remaining = document.getElementById("progress-remaining");
  if (remaining) remaining.textContent = duration(msg.remaining_s);
  const explanation = document.getElementById("run-explanation");
  explanation.textContent = msg.explanation || "";
  explanation.className = msg.status === "failed" ? "flash error" : "muted";
  if (msg.finished && !finished) {
    finished = true;
    document.getElementById("cancel-form")?.remove();
    wsState.textContent = "finished: loading the results…";
    location.reload();
  }
}

async function readState() {
  const resp = await fetch(root.dataset.stateUrl, { credentials: "same-origin" });
  if (!resp.ok) { wsState.textContent = `could not read the run's state (${resp.status})`; return; }
  apply(await resp.json());
}

setInterval(() => {  // the clock runs between messages
  if (startedAt !== null && !finished && root.dataset.status === "running") {
    document.getElementById("progress-elapsed").textContent = duration((Date.now() - startedAt) / 1000);
  }
}, 1000);

if (!finished) {
  liveSocket(`/ws/evalruns/${runId}/`, { root, status: wsState, onMessage: apply, onOpen: readState, done: () => finished });
}
