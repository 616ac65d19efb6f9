// The ids of the topology picture's boxes and edges, as apps/telemetry/edge_ids.py builds them: a box is
// `inst:<instance name>` or `proc:<process key>`, an edge `<kind>:<source>-><target>`.
const KV_TRANSFER = "kv_transfer";

export const instanceEnd = (name) => `inst:${name}`;
export const processEnd = (key) => `proc:${key}`;
// What an end names, without its kind: "inst:p0" -> "p0", "client" -> "client".
export const endName = (end) => end.replace(/^\w+:/, "");

export const kvEdgeId = (prefill, decode) => `${KV_TRANSFER}:${instanceEnd(prefill)}->${instanceEnd(decode)}`;

// [prefill, decode] of a KV hand-over's id.
export function kvEdgeInstances(id) {
  const [source, target] = id.slice(KV_TRANSFER.length + 1).split("->");
  return [endName(source), endName(target)];
}
