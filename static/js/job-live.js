// Live job page: subscribe to the socket first, then backfill over REST; counters make it gap- and duplicate-free.
import { liveSocket } from "./live-socket.js";

const root = document.getElementById("job");
const jobId = root.dataset.jobId;
const log = document.getElementById("log");
const wsState = document.getElementById("ws-state");
let lastCounter = 0;
let backfilling = null;
const FINISHED = new Set(["successful", "failed", "error", "canceled"]);

function appendEvent(ev) {
  if (ev.counter <= lastCounter) return;            // already shown
  if (ev.counter > lastCounter + 1) { backfill(); return; }  // a gap (throttled socket): fetch from REST
  lastCounter = ev.counter;
  const line = document.createElement("span");
  line.className = ev.stream;
  line.dataset.counter = ev.counter;
  const node = ev.node ? `[${ev.node}] ` : "";
  line.textContent = `${ev.time.slice(11, 19)} ${node}${ev.text}\n`;
  const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 20;
  log.appendChild(line);
  if (atBottom) log.scrollTop = log.scrollHeight;
}

async function backfill() {
  if (backfilling) return backfilling;
  backfilling = (async () => {
    let url = `/api/jobs/${jobId}/events/?counter__gt=${lastCounter}&limit=1000`;
    while (url) {
      const resp = await fetch(url, { credentials: "same-origin" });
      if (!resp.ok) { wsState.textContent = `could not load the log (${resp.status})`; break; }
      const page = await resp.json();
      page.results.forEach(appendEvent);
      url = page.next;
    }
  })().finally(() => { backfilling = null; });
  return backfilling;
}

function setStatus(msg) {
  const badge = document.getElementById("job-status");
  badge.textContent = msg.label;
  badge.className = `badge ${msg.colour}`;
  root.dataset.status = msg.status;
  if (msg.status !== "pending") document.getElementById("job-waiting")?.remove();  // a worker took it
  const expl = document.getElementById("job-explanation");
  expl.textContent = msg.explanation || "";
  expl.className = (msg.status === "failed" || msg.status === "error") ? "flash error" : "muted";
  if (FINISHED.has(msg.status)) {
    document.getElementById("cancel-form")?.remove();
    backfill();
  }
}

function setNode(msg) {
  let row = document.querySelector(`.progress-row[data-node="${CSS.escape(msg.node)}"]`);
  if (!row) {
    row = document.createElement("div");
    row.className = "progress-row";
    row.dataset.node = msg.node;
    row.innerHTML = '<span class="node-name"></span><div class="bar"><div class="bar-fill"></div></div>' +
                    '<span class="badge state"></span><span class="muted message"></span>';
    row.querySelector(".node-name").textContent = msg.node;
    document.getElementById("nodes").appendChild(row);
  }
  row.querySelector(".bar-fill").style.width = `${msg.percent}%`;
  row.querySelector(".bar-fill").className = `bar-fill ${msg.colour}`;
  const state = row.querySelector(".state");
  state.textContent = msg.state;
  state.className = `badge ${msg.colour} state`;
  row.querySelector(".message").textContent = msg.message || "";
}

function onMessage(msg) {
  if (msg.type === "event") appendEvent(msg);
  else if (msg.type === "status") setStatus(msg);
  else if (msg.type === "node") setNode(msg);
}

backfill();
liveSocket(`/ws/jobs/${jobId}/`, { root, status: wsState, onMessage, onOpen: backfill,
                                  done: () => FINISHED.has(root.dataset.status), doneText: "finished" });
