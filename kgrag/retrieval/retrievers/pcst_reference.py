"""A plain per-edge-loop PCST instance builder: the simple reference that tests and benchmarks compare against.

Not registered as a module. It builds the virtual-node instance one edge at a time, as G-Retriever's
released retrieval code does, so agreement tests can check the vectorized ``pcst_select`` and the
benchmark can report the speed-up against it in the same run.
"""

from __future__ import annotations

import numpy as np
import pcst_fast


def pcst_select_reference(
    *, edges: np.ndarray, n_prizes: np.ndarray, e_prizes: np.ndarray, cost_e: float, c: float, root: int, pruning: str
) -> tuple[set[int], set[int]]:
    """Selected nodes and edge rows, computed with a Python loop over edges.

    References
    ----------
    He et al., G-Retriever (2024), section 4 (virtual nodes for edges whose prize beats their cost).
    """
    n = len(n_prizes)
    if len(edges) == 0:
        return ({root} if root >= 0 else set()), set()
    if e_prizes.max() > 0:
        cost_e = min(cost_e, float(e_prizes.max()) * (1 - c / 2))
    real_edges, costs, vprizes, vmap, emap = [], [], [], {}, {}
    virtual_edges, virtual_costs = [], []
    for i, (s, d) in enumerate(edges.tolist()):
        if e_prizes[i] <= cost_e:
            emap[len(real_edges)] = i
            real_edges.append((s, d))
            costs.append(cost_e - e_prizes[i])
        else:
            v = n + len(vprizes)
            vmap[v] = i
            virtual_edges += [(s, v), (v, d)]
            virtual_costs += [0.0, 0.0]
            vprizes.append(e_prizes[i] - cost_e)
    prizes = np.concatenate([n_prizes, np.array(vprizes, dtype=np.float64)])
    all_e = np.array(real_edges + virtual_edges, dtype=np.int64).reshape(-1, 2)
    all_c = np.array(costs + virtual_costs, dtype=np.float64)
    verts, sel = pcst_fast.pcst_fast(all_e, prizes, all_c, int(root), 1, pruning, 0)
    chosen = {emap[int(e)] for e in sel if e < len(real_edges)} | {vmap[int(v)] for v in verts if v >= n}
    nodes = {int(v) for v in verts if v < n} | {int(x) for i in chosen for x in edges[i]}
    return nodes, chosen
