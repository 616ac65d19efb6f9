// The picture's colours: a state colour's stroke and tint (the names are the choices' colours,
// apps/coloured_choices.py), and one shade per DP rank on a node.
import { rankNode } from "./layout.js";

export const COLOUR = { green: "#1e8e3e", amber: "#c77700", red: "#c5221f", blue: "#1a73e8", grey: "#6b7280", purple: "#7c3aed" };
export const TINT = { green: "#e6f4ea", amber: "#fef3e0", red: "#fce8e6", blue: "#e8f0fe", grey: "#f3f4f6", purple: "#f3e8ff" };
const ROLE_HUE = { prefill: 214, decode: 140 };

// One colour per DP rank on a node: the role's hue, lightness stepping through the node's ranks in order.
export function rankColours(snapshot) {
  const colours = new Map();
  for (const node of snapshot.nodes) {
    const ranks = [];
    for (const inst of snapshot.instances) {
      for (const r of inst.ranks) if (rankNode(inst, r) === node.name) ranks.push([inst, r]);
    }
    ranks.forEach(([inst, r], k) => {
      const light = ranks.length > 1 ? 30 + (40 * k) / (ranks.length - 1) : 42;
      colours.set(`${inst.name}/${r.dp_rank}`, { fill: `hsl(${ROLE_HUE[inst.role] ?? 270} 70% ${light}%)`, dark: light < 56 });
    });
  }
  return colours;
}

export function stateStyle(obj) {
  const colour = obj.state ? (COLOUR[obj.state_colour] || COLOUR.grey) : "#9ca3af";
  return { colour, tint: obj.state ? (TINT[obj.state_colour] || TINT.grey) : "#fafafa" };
}
