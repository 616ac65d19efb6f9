// Health (apps/telemetry/health, docs/health-policy.md): each round's health section names every instance and
// service process's state; it colours and labels their boxes in place, over the process state the snapshot drew
// (which only a job changes).
import { COLOUR, TINT, stateStyle } from "./palette.js";
import { picture } from "./state.js";

function healthTargets() {
  const instances = new Map((picture.snapshot?.instances ?? []).map((i) => [i.name, i]));
  const services = new Map((picture.snapshot?.services ?? []).map((s) => [s.key, s]));
  const out = [];
  for (const g of picture.svg.querySelectorAll(".topo-instance[data-instance], .topo-service[data-key]")) {
    const id = g.dataset.instance ?? g.dataset.key;
    const obj = g.dataset.instance !== undefined ? instances.get(id) : services.get(id);
    if (!obj) continue;
    const title = g.querySelector(":scope > title");
    out.push({ g, id, obj, box: g.querySelector(":scope > rect"), dot: g.querySelector(":scope > circle"),
      label: g.querySelector(":scope > .state-label"), title, base: title?.textContent, painted: null });
  }
  return out;
}

export function paintHealth(live) {
  const health = live?.health ?? {};
  picture.healthBoxes ??= healthTargets();
  for (const t of picture.healthBoxes) {
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
