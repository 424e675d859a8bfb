"""``python -m benchmarks --http``: each figure once per backend, with its rule (a tiny run: the
numbers mean nothing, the machinery is what is tested)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_http_group_reports_every_figure_with_its_rule(backend: str) -> None:
    """http_submit: ratio = value / (remote_submit then bare HTTP, timed as one), ok by 1.3, and the
    ratio over the two timed apart beside it; http_events_fanout: a p99."""
    from benchmarks import bench_http

    rows = bench_http.run((backend,), quick=False, tiny=True)
    assert [(r["name"], r["backend"]) for r in rows] == [
        ("http_submit", backend),
        ("http_events_fanout", backend),
        ("hook_http", backend),
    ]
    submit, fanout, hook = rows
    assert submit["floor"] > 0
    assert submit["ratio"] == round(submit["value"] / submit["floor"], 3)
    apart = submit["remote_submit"] + submit["bare_http"]
    assert submit["floor"] != round(apart, 7)  # the two timed as one, not the sum of their medians
    assert submit["ratio_to_apart"] == pytest.approx(submit["value"] / apart, abs=2e-3)
    assert submit["ok"] is (submit["ratio"] <= 1.3)
    assert fanout["subscribers"] == 100
    assert 0 < fanout["value"] <= fanout["p99"]
    assert "http_submit" in bench_http.table(rows)
    assert "hook_http" in bench_http.table(rows)
    # hook_http: every request delivered (the run raises otherwise); ratio over /ping, two rules
    assert (hook["unit"], hook["target"], hook["limit"]) == ("s", 2.0, 0.010)
    assert hook["value"] > 0
    assert hook["floor"] > 0
    assert hook["ratio"] == round(hook["value"] / hook["floor"], 3)
    assert hook["ok"] is (hook["ratio"] <= 2.0 and hook["value"] <= 0.010)
