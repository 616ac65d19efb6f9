// The picture of one snapshot: laid out, then drawn into a fresh SVG (boxes, edges, then the live layer).
import { defs, drawEdges } from "./edges.js";
import { WIDTH, layout } from "./layout.js";
import { drawLive } from "./live.js";
import { drawBand, drawFrame, drawNode, drawService } from "./nodes.js";
import { rankColours } from "./palette.js";
import { picture } from "./state.js";
import { el, text } from "./svg.js";

export function draw(snapshot) {
  const holder = picture.root.querySelector(".topology-canvas");
  holder.replaceChildren();
  picture.kvGeometry.clear();
  picture.svg = null;
  picture.healthBoxes = null;
  if (!snapshot.nodes.length) return;
  picture.liveRows = Boolean(snapshot.live);
  picture.poolOf = new Map(snapshot.edges.filter((e) => e.kind === "kv_pool").map((e) => [e.source, e.mode ?? ""]));
  const lay = layout(snapshot);
  picture.boxes = lay.boxes;
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
  picture.svg = svg;
  drawLive(snapshot.live);
}
