// Spec editor: line numbers beside the YAML, and a click on a problem's "line N" jumps there and selects it.
const area = document.getElementById("yaml");
const gutter = document.getElementById("gutter");

function renumber() {
  const n = area.value.split("\n").length;
  const marked = new Set([...document.querySelectorAll("[data-line]")].map((el) => Number(el.dataset.line)).filter(Boolean));
  gutter.textContent = "";
  for (let i = 1; i <= n; i++) {
    const span = document.createElement("span");
    span.textContent = `${i}\n`;
    if (marked.has(i)) span.className = "marked";
    gutter.appendChild(span);
  }
}

function gotoLine(line) {
  const lines = area.value.split("\n");
  const start = lines.slice(0, line - 1).reduce((sum, l) => sum + l.length + 1, 0);
  area.focus();
  area.setSelectionRange(start, start + (lines[line - 1] || "").length);
  const lineHeight = parseFloat(getComputedStyle(area).lineHeight) || 18;
  area.scrollTop = Math.max(0, (line - 5) * lineHeight);
}

if (area && gutter) {
  renumber();
  area.addEventListener("input", renumber);
  area.addEventListener("scroll", () => { gutter.scrollTop = area.scrollTop; });
  document.querySelectorAll(".goto-line").forEach((a) => a.addEventListener("click", (ev) => {
    ev.preventDefault();
    gotoLine(Number(a.dataset.line));
  }));
}

// Form editor: the KV pool's memcache-only fields are switched off (so not submitted, not saved) while the
// backend is not memcache; without this script they are submitted and a mooncake pool reports them on the field.
const backend = document.getElementById("f-kv-pool-backend");
const memcacheOnly = document.querySelector("[data-memcache-only]");

function memcacheFields() {
  const on = backend.value === "memcache";
  memcacheOnly.toggleAttribute("data-off", !on);
  memcacheOnly.querySelectorAll("input, select").forEach((el) => { el.disabled = !on; });
}

if (backend && memcacheOnly) {
  memcacheFields();
  backend.addEventListener("change", memcacheFields);
}
