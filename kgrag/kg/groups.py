"""Edge groups: every edge end of a KG grouped by (node, direction, relation), a group's edges by id.

``relpath``'s hub step (ToG's entity sampling) reads a frontier's group sizes before any edge, then fetches only the
edges it keeps. :class:`EdgeGroups` holds what it reads:

- ``keys``: the distinct group keys, sorted: ``(node * 2 + backward) * n_relations + relation`` (``backward``: the
  node is the edge's tail);
- ``starts``: where each group's rows begin (one more entry: the end of the last);
- ``edge``: the rows, group by group, each group's by edge id (a triple's row number);
- ``other``: on disk only, each row's other end (the node the step reaches), so that a step reads no triple.

A KG held as arrays builds them in memory (:meth:`EdgeGroups.from_arrays`: a sort of 2 x triples keys). The DuckDB
store writes them once per KG file beside its sidecar (:func:`write_groups`: DuckDB sorts, spilling to disk under the
store's memory cap, in passes over node ranges when the rows would pass half of it; the rows are streamed into
``.npy`` files) and opens them memory-mapped (:func:`open_groups`), so a
step at 100M triples reads a few pages of each file instead of a SQL query over a hub's edges, and nothing of size
O(triples) is held in the process: the files stay in the page cache, shared by every process (Dask workers) that
opens them.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kgrag import arrays
from kgrag import schema as S

GROUPS_VERSION = "1"  # bump when the files' layout changes
FILES = ("keys", "starts", "edge", "other")
BATCH_ROWS = 1 << 22  # rows streamed from DuckDB at a time while writing


def group_keys(nodes: np.ndarray, backward: np.ndarray, relations: np.ndarray, n_rel: int) -> np.ndarray:
    """Group keys ``(node * 2 + backward) * n_rel + relation`` (``backward``: the node is the edge's tail), the order
    of :attr:`EdgeGroups.keys` (and of :func:`write_groups`' SQL)."""
    nodes, relations = np.asarray(nodes, dtype=np.int64), np.asarray(relations, dtype=np.int64)
    return (nodes * 2 + np.asarray(backward, dtype=np.int64)) * int(n_rel) + relations


def split_keys(keys: np.ndarray, n_rel: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(node, forward, relation) of group keys (:func:`group_keys`)."""
    keys = np.asarray(keys, dtype=np.int64)
    return keys // (2 * n_rel), (keys // n_rel) % 2 == 0, keys % n_rel


@dataclass(frozen=True)
class EdgeGroups:
    """The groups of a KG's edge ends (module docstring); arrays in memory or memory-mapped."""

    keys: np.ndarray
    starts: np.ndarray
    edge: np.ndarray
    n_rel: int
    other: np.ndarray | None = None

    @staticmethod
    def from_arrays(heads: np.ndarray, relations: np.ndarray, tails: np.ndarray, n_rel: int) -> "EdgeGroups":
        """The groups of a KG held as arrays (``other`` left out: the step reads the KG's own arrays)."""
        n = len(heads)
        key = group_keys(np.concatenate([heads, tails]), np.repeat(np.array([0, 1], dtype=np.int64), n),
                         np.concatenate([relations, relations]), n_rel)
        order = np.argsort(key, kind="stable")  # stable: a group's edges by id
        key = key[order]
        first = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if n else np.zeros(0, np.int64)
        return EdgeGroups(keys=key[first], starts=np.append(first, 2 * n).astype(np.int64),
                          edge=(order % max(n, 1)).astype(np.int32 if n < 2**31 else np.int64), n_rel=int(n_rel))

    def at(self, frontier: np.ndarray) -> np.ndarray:
        """Indices of the groups of the ``frontier`` nodes (sorted ids), by (node, direction, relation)."""
        span = 2 * self.n_rel
        frontier = np.asarray(frontier, dtype=np.int64)
        return arrays.ranges(np.searchsorted(self.keys, frontier * span),
                             np.searchsorted(self.keys, (frontier + 1) * span))


def groups_folder(sidecar: str | Path) -> Path:
    """Where the groups of the KG whose sidecar is ``sidecar`` live (keyed as the sidecar is: a rewritten KG file
    gets new ones)."""
    sidecar = Path(sidecar)
    return sidecar.with_name(f"{sidecar.stem}.groups-v{GROUPS_VERSION}")


def write_groups(con, out: str | Path, *, num_triples: int, num_entities: int, n_rel: int,
                 triples: str = "kg.triples") -> Path:
    """Write the groups of the triples table ``triples`` (on DuckDB connection ``con``) into the folder ``out``,
    atomically: written under a temporary name and renamed when whole, so a full disk or a kill leaves no folder a
    later run would take as complete. Processes that write the same groups at once (a Dask run's workers) all
    return ``out``: the first rename wins, the others' files are dropped."""
    out = Path(out)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _write(con, tmp, num_triples, num_entities, n_rel, triples)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if (out / "groups.json").exists():  # another process (a Dask worker) finished the same files first
            return out
        raise
    return out


#: bytes a sorted row may take in DuckDB's sort (key, edge and other, 8 bytes each, with the sort's own copies):
#: the groups are sorted in passes of at most half the connection's memory limit over this
SORT_ROW_BYTES = 96
_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "KB": 10**3, "MB": 10**6, "GB": 10**9,
          "TB": 10**12}


def memory_limit(con) -> int | None:
    """The DuckDB connection's ``memory_limit`` in bytes (None when it cannot be read)."""
    try:
        value, unit = str(con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]).split()
        return int(float(value) * _UNITS[unit])
    except (ValueError, KeyError, TypeError):
        return None


def node_ranges(con, triples: str, rows: int, limit: int | None) -> list[tuple[int | None, int | None]]:
    """[lo, hi) node-id ranges, one a sort pass, each holding about the same number of edge ends, so that a pass
    sorts at most half of ``limit`` (the connection's memory limit): DuckDB's sort of 2 x 100M rows under a 5.4 GiB
    limit ran out of memory while streaming (seen 2026-12-04). Bounds from ``approx_quantile`` of every edge end's
    node; one range (no bounds) when the rows fit."""
    passes = 1 if not limit else -(-rows * SORT_ROW_BYTES // max(limit // 2, 1))
    if passes <= 1:
        return [(None, None)]
    qs = [i / passes for i in range(1, passes)]
    got = con.execute(f"SELECT approx_quantile(node, {qs}) FROM (SELECT {S.HEAD} AS node FROM {triples} "
                      f"UNION ALL SELECT {S.TAIL} FROM {triples})").fetchall()[0][0]
    cuts = sorted({int(x) for x in got})
    return list(zip([None, *cuts], [*cuts, None]))


def _in_range(col: str, lo: int | None, hi: int | None) -> str:
    conds = ([f"{col} >= {lo}"] if lo is not None else []) + ([f"{col} < {hi}"] if hi is not None else [])
    return f" WHERE {' AND '.join(conds)}" if conds else ""


def _sorted_batches(con, triples: str, k: int, ranges):
    """Arrow batches of (key, edge, other) of every edge end, sorted by (key, edge): one sorted query per node range
    (a node's keys all fall inside its range's, so the passes follow one another in key order)."""
    for lo, hi in ranges:
        rel = con.sql(
            f"SELECT key, edge, other FROM ("
            f"SELECT ({S.HEAD} * 2) * {k} + {S.RELATION} AS key, rowid AS edge, {S.TAIL} AS other FROM {triples}"
            f"{_in_range(S.HEAD, lo, hi)} "
            f"UNION ALL SELECT ({S.TAIL} * 2 + 1) * {k} + {S.RELATION}, rowid, {S.HEAD} FROM {triples}"
            f"{_in_range(S.TAIL, lo, hi)}) ORDER BY key, edge")
        yield from rel.to_arrow_reader(BATCH_ROWS)


def _write(con, folder: Path, num_triples: int, num_entities: int, n_rel: int, triples: str) -> None:
    rows = 2 * num_triples
    edge_t = np.int32 if rows < 2**31 else np.int64
    node_t = np.int32 if num_entities < 2**31 else np.int64
    edge = np.lib.format.open_memmap(folder / "edge.npy", mode="w+", dtype=edge_t, shape=(rows,))
    other = np.lib.format.open_memmap(folder / "other.npy", mode="w+", dtype=node_t, shape=(rows,))
    k = int(n_rel)
    ranges = node_ranges(con, triples, rows, memory_limit(con))
    keys, starts, at, last = [], [], 0, None
    for batch in _sorted_batches(con, triples, k, ranges):
        key = batch.column(0).to_numpy().astype(np.int64, copy=False)
        n = len(key)
        if not n:
            continue
        edge[at:at + n] = batch.column(1).to_numpy()
        other[at:at + n] = batch.column(2).to_numpy()
        new = np.concatenate([[last is None or key[0] != last], key[1:] != key[:-1]])
        first = np.flatnonzero(new)
        keys.append(key[first])
        starts.append(first.astype(np.int64) + at)
        at += n
        last = int(key[-1])
    if at != rows:
        raise RuntimeError(f"edge groups: {at} rows streamed of {rows} expected (2 per triple)")
    edge.flush()
    other.flush()
    del edge, other
    np.save(folder / "keys.npy", np.concatenate(keys) if keys else np.zeros(0, np.int64))
    np.save(folder / "starts.npy", np.append(np.concatenate(starts) if starts else np.zeros(0, np.int64), rows))
    (folder / "groups.json").write_text(json.dumps({"version": GROUPS_VERSION, "triples": int(num_triples),
                                                    "entities": int(num_entities), "relations": k}))


def open_groups(folder: str | Path) -> EdgeGroups:
    """The groups written by :func:`write_groups`, memory-mapped read-only."""
    folder = Path(folder)
    meta = json.loads((folder / "groups.json").read_text())
    arr = {f: np.load(folder / f"{f}.npy", mmap_mode="r") for f in FILES}
    return EdgeGroups(keys=arr["keys"], starts=arr["starts"], edge=arr["edge"], other=arr["other"],
                      n_rel=int(meta["relations"]))
