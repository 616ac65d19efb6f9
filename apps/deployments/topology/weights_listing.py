"""Do the nodes hold the same model weights? Compare each node's listing of the model directory (file name -> size
in bytes) with the one most nodes share, and name the first file that differs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class WeightsDifference:
    node: str
    reference: tuple[str, ...]  # the nodes whose listing it was compared with
    file: str
    kind: str  # "missing" (the reference has it), "extra" (only this node has it) or "size"
    expected_size: int | None
    actual_size: int | None

    @property
    def message(self) -> str:
        against = ", ".join(self.reference)
        if self.kind == "missing":
            return f"{self.node} lacks {self.file} ({self.expected_size} bytes on {against})"
        if self.kind == "extra":
            return f"{self.node} has {self.file} ({self.actual_size} bytes), which {against} lack"
        return f"{self.node}: {self.file} is {self.actual_size} bytes, {self.expected_size} on {against}"


def _first_difference(node: str, listing: Mapping[str, int], reference: Mapping[str, int],
                      reference_nodes: tuple[str, ...]) -> WeightsDifference:
    for file in sorted(set(listing) | set(reference)):
        expected, actual = reference.get(file), listing.get(file)
        if expected != actual:
            kind = "missing" if actual is None else "extra" if expected is None else "size"
            return WeightsDifference(node, reference_nodes, file, kind, expected, actual)
    raise AssertionError("listings differ but no file does")


def weights_listing_differences(listings: Mapping[str, Mapping[str, int]]) -> tuple[WeightsDifference, ...]:
    """For each node whose listing differs from the majority's (more than half of the nodes share it), or from the
    first node's when no listing has a majority: the first differing file in sorted order. In the nodes' order."""
    if not listings:
        return ()
    groups: dict[frozenset, list[str]] = {}
    for node, listing in listings.items():
        groups.setdefault(frozenset(listing.items()), []).append(node)
    majority = next((nodes for nodes in groups.values() if 2 * len(nodes) > len(listings)), None)
    reference_nodes = tuple(majority) if majority else (next(iter(listings)),)
    reference = listings[reference_nodes[0]]
    return tuple(_first_difference(node, listing, reference, reference_nodes)
                 for node, listing in listings.items() if dict(listing) != dict(reference))
