"""A draft's layout: its nodes flat in breadth-first order with a parent list, `parents[i]` the
index of node i's parent, ROOT for a child of the last committed token (tree.py says the rest).
A chain is the tree of width 1: parents -1, 0, 1, ...; row 0 is the root's, row i + 1 node i's."""

from __future__ import annotations

from collections.abc import Sequence

ROOT = -1
"""The parent of a node drafted right after the last committed token."""


def depths(parents: Sequence[int]) -> list[int]:
    """Each node's depth, 1 for a child of the root (parents come before their children)."""
    out: list[int] = []
    for parent in parents:
        out.append(1 if parent == ROOT else out[parent] + 1)
    return out


def children(parents: Sequence[int]) -> list[list[int]]:
    """The children of each row in drafting order: row 0 the root, row i + 1 node i."""
    rows: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for node, parent in enumerate(parents):
        rows[parent + 1].append(node)
    return rows


def is_chain(parents: Sequence[int]) -> bool:
    return all(parent == node - 1 for node, parent in enumerate(parents))


def chain(nodes: int) -> tuple[int, ...]:
    """The parent list of a chain of `nodes` drafted tokens: the tree of width 1."""
    return tuple(range(ROOT, nodes - 1))


def siblings_under(parents: Sequence[int], parent: int) -> list[int]:
    """The children of `parent` (ROOT: the root's), in drafting order."""
    return children(parents)[parent + 1]


def is_layout(parents: Sequence[int], nodes: int) -> bool:
    """Whether `parents` lays out a tree of `nodes` nodes as this file says: one parent each,
    drawn before its child (ROOT or an earlier node)."""
    return len(parents) == nodes and all(ROOT <= parent < node for node, parent in enumerate(parents))
