// Plan page: each process's Copy button puts its docs-form text (files, exports, command) on the clipboard. Over
// plain http the Clipboard API is missing: the text is then selected and copied the old way, or left selected.
function selectText(node) {
  const range = document.createRange();
  range.selectNodeContents(node);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}

async function copyText(text, node) {
  if (navigator.clipboard && window.isSecureContext) {
    try { await navigator.clipboard.writeText(text); return "Copied"; } catch (err) { /* fall back below */ }
  }
  selectText(node);
  try { if (document.execCommand("copy")) return "Copied"; } catch (err) { /* left selected */ }
  return "Selected: press Ctrl+C";
}

document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const pre = button.closest(".plan-process").querySelector("pre.plan-docs");
  button.textContent = await copyText(pre.textContent, pre);
  setTimeout(() => { button.textContent = "Copy"; }, 2000);
});
