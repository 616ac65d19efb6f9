// Topology picture of a deployment (templates/deployments/_topology.html): draws the read model
// (/deployments/<pk>/topology.json) as an SVG. Re-fetches every 5 s while a job of the deployment is pending or
// running, so the picture shows the state the job left behind. Live load (apps.telemetry: running/waiting, KV usage,
// token rates per instance; req/s and KV bytes/s per P->D edge) comes with the snapshot and then over
// /ws/deployments/<id>/, redrawing only the live layer.
import { liveSocket } from "../live-socket.js";
import { draw } from "./draw.js";
import { drawLive } from "./live.js";
import { liveStatus, showProblems } from "./panels.js";
import { appendRound } from "./sparklines.js";
import { picture } from "./state.js";

const { root } = picture;
const POLL_MS = 5000;
let lastBody = "";
let timer = null;
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
    const pushed = picture.snapshot ? picture.snapshot.live : early;
    early = null;
    const newer = pushed && (!snapshot.live || pushed.at > snapshot.live.at);
    if (newer) snapshot.live = { ...pushed, history: appendRound(snapshot.live?.history, pushed.history_point) };
    picture.snapshot = snapshot;
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

// Opened beside the first read of the snapshot, so no round falls between the two; after a close it opens again
// and reads the snapshot anew, for what was pushed while it was closed.
function connectLive(deploymentId) {
  socketOpened = true;
  liveSocket(`/ws/deployments/${deploymentId}/`, { root, onMessage: onRound, onOpen: ({ reopened }) => reopened && refresh() });
}

// Each scrape round arrives here; only the live layer is redrawn (the whole picture when its row first appears).
function onRound(msg) {
  if (msg.type !== "live") return;
  if (!picture.snapshot) {
    if (msg.live && (!early || msg.live.at > early.at)) early = msg.live;
    return;
  }
  if (msg.live) msg.live.history = appendRound(picture.snapshot.live?.history, msg.live.history_point);
  picture.snapshot.live = msg.live;
  if (Boolean(msg.live) !== picture.liveRows) draw(picture.snapshot);
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
