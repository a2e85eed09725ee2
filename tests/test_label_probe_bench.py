"""bench/label_probe.py's parts: the graph's relation names as tokens, and a probe that finds a signal where
there is one and reports the majority where there is none."""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix

from bench.label_probe import accuracy, has_negated_relation, probe, relations


def test_relation_names_keep_negation_apart():
    graph = "(cannabis; synonym of; marijuana)(marijuana; not capable of; harm)(harm; desires; legal)"
    assert relations(graph) == "synonym_of not_capable_of desires"
    assert has_negated_relation(graph) and has_negated_relation("(a; antonym of; b)")
    assert not has_negated_relation("(a; is a; b)(b; has context; nothing)")


def test_a_probe_reads_a_planted_signal_and_only_that():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    noise = rng.normal(size=(400, 5))
    signal = np.hstack([noise, y[:, None] + 0.1 * rng.normal(size=(400, 1))])
    found = probe(signal[:300], y[:300], signal[300:], y[300:], dense=True)
    assert found["accuracy"] >= 0.95 and found["accuracy_ci95"][0] >= 0.9
    blind = probe(csr_matrix(noise[:300]), y[:300], csr_matrix(noise[300:]), y[300:], dense=False)
    assert blind["accuracy"] <= 0.65


def test_accuracy_interval_brackets_the_mean():
    a = accuracy(np.array([1.0] * 30 + [0.0] * 70))
    assert a["accuracy"] == 0.3 and a["accuracy_ci95"][0] < 0.3 < a["accuracy_ci95"][1]
