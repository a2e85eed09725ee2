"""bench/dag_scale.py's growth exponents: k of ``value ~ triples^k`` between consecutive sizes, per stage."""

from __future__ import annotations

import pytest

from bench.dag_scale import exponent, growth


def test_exponent_reads_linear_sublinear_and_quadratic_growth():
    assert exponent(10.0, 100.0, 1_000_000, 10_000_000) == 1.0
    assert exponent(10.0, 10.0, 1_000_000, 10_000_000) == 0.0
    assert exponent(2.0, 200.0, 1_000_000, 10_000_000) == 2.0
    assert exponent(0.0, 5.0, 1, 10) is None  # a stage that took no measurable time has no exponent


def test_growth_pairs_consecutive_sizes_in_triple_order_whatever_the_file_order():
    def row(size, n, secs, rss, p50):
        return {"size": size, "triples": n, "retrieve": {"ms_p50": p50},
                "stages": {"ingest": {"seconds": secs, "peak_rss_gib": rss}}}

    sizes = {"100M": row("100M", 10**8, 1000.0, 14.0, 80.0), "1M": row("1M", 10**6, 10.0, 0.5, 40.0),
             "10M": row("10M", 10**7, 100.0, 1.6, 50.0)}
    g = growth(sizes)
    assert list(g["ingest"]) == ["1M->10M", "10M->100M"]
    assert g["ingest"]["1M->10M"] == {"seconds": 1.0, "peak_rss": pytest.approx(0.51, abs=0.01)}
    assert g["ingest"]["10M->100M"]["seconds"] == 1.0
    assert g["retrieve_ms_p50"]["1M->10M"] == pytest.approx(0.1, abs=0.01)
    assert "relplan" not in g  # a stage not run at both sizes has no row
