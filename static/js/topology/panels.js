// The text beside the picture: how fresh the live figures are, and why the revision does not plan.
import { picture } from "./state.js";

export function liveStatus(live) {
  if (!live) return "live: no scrape yet";
  const bad = live.targets.filter((t) => t.status !== "ok");
  return `live ${live.stale ? "STALE, " : ""}read ${new Date(live.at * 1000).toLocaleTimeString()}`
    + (bad.length ? ` · ${bad.length} of ${live.targets.length} targets not read: ${bad.map((t) => `${t.key} ${t.status}`).join(", ")}` : "");
}

export function showProblems(snapshot) {
  const box = picture.root.querySelector(".topology-problems");
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
