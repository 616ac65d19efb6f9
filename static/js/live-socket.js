// A page's websocket to its object (/ws/jobs/<id>/, /ws/evalruns/<id>/, /ws/deployments/<id>/) that opens again
// after every close, waiting longer after each close in a row; one that opens starts the waits over. `root` gets
// data-ws="open" | "closed" (the browser and reliability tests watch it); a `status` element reads "live" or
// "reconnecting…". Once `done()` says the object will send nothing more, a close is final (`doneText`, if given).
const RECONNECT_MS = [500, 1000, 2000, 5000];

export function liveSocket(path, { root, onMessage, onOpen = () => {}, status = null, done = () => false, doneText = null }) {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}`;
  let closes = 0;
  function connect() {
    const ws = new WebSocket(url);
    ws.onopen = () => {
      if (status) status.textContent = "live";
      root.dataset.ws = "open";
      onOpen({ reopened: closes > 0 });
      closes = 0;
    };
    ws.onmessage = (e) => onMessage(JSON.parse(e.data));
    ws.onclose = () => {
      root.dataset.ws = "closed";
      if (done()) {
        if (status && doneText) status.textContent = doneText;
        return;
      }
      if (status) status.textContent = "reconnecting…";
      setTimeout(connect, RECONNECT_MS[Math.min(closes, RECONNECT_MS.length - 1)]);
      closes += 1;
    };
  }
  connect();
}
