// What the picture's modules share, in one object: the page's section, the snapshot shown (its live section
// replaced by each round pushed since), and what the last drawing left for the live layer and the health paint.
export const picture = {
  root: document.getElementById("topology"),
  snapshot: null,
  svg: null, // the drawing of the snapshot, once attached
  boxes: new Map(), // box id (instance, service, "client", ...) -> where it was laid out
  kvGeometry: new Map(), // kv_transfer edge id -> its path group and end points
  liveRows: false, // whether the boxes were laid out with a row for live load
  poolOf: new Map(), // instance id -> what it does with the KV pool (its edge's mode): a row for the pool when live
  healthBoxes: null, // the boxes health paints, found once per drawing (by reference after that)
  rounds: [], // rounds seen by this page (sparklines.js), for a field the server's history does not carry
};
