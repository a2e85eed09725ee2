"""Community detection on local subgraphs with a maximum community size (FastToG's Local Community Search).

Each detector is one file registered in ``DETECTORS``; it yields the partitions of its run in
*backtracking order* (see ``detect``), so the size constraint is enforced the same way for all of them.
"""

from kgrag.reasoning.community.core import DETECTORS, coarse_prune, community_modularity, detect, simple_edges  # noqa: F401
