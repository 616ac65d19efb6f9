// SVG elements of the picture: make one, put text in it, measure text, hang a hover on it.
import { picture } from "./state.js";

const NS = "http://www.w3.org/2000/svg";

export function el(tag, attrs = {}, parent = null) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

export function text(parent, x, y, str, attrs = {}) {
  const t = el("text", { x, y, ...attrs }, parent);
  t.textContent = str;
  return t;
}

// Text widths from a canvas with the element's font (looked up once per class): SVG's getComputedTextLength()
// forces a layout of the whole picture each time, which at 256 instances costs more than the drawing.
const measureCtx = document.createElement("canvas").getContext("2d");
const fontOf = new Map();

export function textWidth(t) {
  const cls = t.getAttribute("class") ?? "";
  let font = fontOf.get(cls);
  if (font === undefined) {
    const probe = t.isConnected ? t : (picture.svg ?? picture.root).appendChild(t.cloneNode(false)); // detached: a stand-in
    const cs = getComputedStyle(probe);
    if (probe !== t) probe.remove();
    font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    fontOf.set(cls, font);
  }
  measureCtx.font = font;
  return measureCtx.measureText(t.textContent).width;
}

export function tip(parent, str) {
  el("title", {}, parent).textContent = str;
}

export function label(svg, x, y, str, anchor = "middle", cls = "edge-label") {
  return text(svg, x, y, str, { class: cls, "text-anchor": anchor });
}
