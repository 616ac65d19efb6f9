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
