"""The UI's pure parts: warning rules, the SVG chart, number and duration formats."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from offsetbatch.monitor import chart, health, views


def _status(lag=0, kafka_error=None):
    return {"pipeline": "orders", "lag_records": lag, "kafka_error": kafka_error, "partitions": []}


def _summary(last=None, age=60.0, gaps=0, lost=0):
    return {"last_batch": last, "last_batch_age_seconds": age, "last_24h": {"gaps": gaps, "records_lost": lost}}


def _batch(status="committed", attempts=1):
    return {"batch_id": 7, "kind": "incremental", "status": status, "run_id": "scheduled__x", "attempts": attempts}


@pytest.mark.parametrize("history,now,growing", [
    ([10, 20, 30], 40, True),
    ([10, 20, 30], 30, False),      # flat now
    ([10, 30, 20], 40, False),      # fell once
    ([20, 30], 40, False),          # too little history
    ([10, 20, 30], None, False),    # Kafka unknown: two rises only
    ([5, 10, 20, 30], None, True),  # Kafka unknown: three rises in the plans alone
])
def test_lag_growing(history, now, growing):
    assert health.lag_growing(history, now) is growing


def test_assess_ok_when_caught_up():
    assert health.assess(_status(0), _summary(_batch()), []) == ("ok", [])


def test_assess_failed_run_is_an_error_naming_batch_and_run():
    state, found = health.assess(_status(0), _summary(_batch("planned", attempts=2)), [])
    assert state == "error"
    assert "batch 7" in found[0].text and "scheduled__x" in found[0].text and "2 attempt(s)" in found[0].text


def test_assess_growing_lag_and_data_loss_and_kafka():
    points = [{"lag": v} for v in (100, 200, 300)]
    state, found = health.assess(_status(400, "NoBrokersAvailable: x"), _summary(_batch(), gaps=1, lost=42), points)
    texts = " | ".join(f.text for f in found)
    assert state == "error"
    assert "Kafka unreachable" in texts and "lag growing: 100 → 200 → 300 → 400" in texts and "42 records" in texts


def test_assess_stale_planned_batch_warns():
    state, found = health.assess(_status(0), _summary(_batch("planned", attempts=0), age=7200), [])
    assert state == "warning" and "2.0 h ago" in found[0].text


def _points():
    return [{"batch_id": i, "at": f"2030-01-01T0{i}:00:00+00:00", "status": "committed", "lag": lag,
             "records": 10, "lag_after": max(lag - 10, 0)} for i, lag in enumerate((50, 0, 25), start=1)]


def test_lag_svg_plots_every_batch_scaled_to_the_largest_lag():
    svg = chart.lag_svg(_points(), [{"topic": "t", "partition": 0, "from_offset": 5, "until_offset": 9,
                                     "reason": "retention", "detected_at": "2030-01-01T02:30:00+00:00"}])
    root = ET.fromstring(svg)  # well-formed
    ns = "{http://www.w3.org/2000/svg}"
    circles = root.findall(f"{ns}circle")
    assert [c.find(f"{ns}title").text.split(": lag")[0] for c in circles] == [
        "batch 1 at 2030-01-01T01:00:00+00:00", "batch 2 at 2030-01-01T02:00:00+00:00",
        "batch 3 at 2030-01-01T03:00:00+00:00"]
    ys = [float(c.get("cy")) for c in circles]
    assert ys[0] == chart.PAD_T and ys[1] == chart.H - chart.PAD_B  # max lag at the top, zero at the bottom
    xs = [float(c.get("cx")) for c in circles]
    assert xs[0] == chart.PAD_L and xs[2] == chart.W - chart.PAD_R and xs[0] < xs[1] < xs[2]
    gap = root.find(f"{ns}line[@class='gap']")
    assert gap is not None and "[5, 9) retention" in gap.find(f"{ns}title").text
    assert float(gap.get("x1")) == pytest.approx((xs[1] + xs[2]) / 2)


def test_lag_svg_without_history_says_so():
    assert "No lag history yet" in chart.lag_svg([])


def test_lag_svg_escapes_text():
    pts = _points()
    pts[0]["status"] = '"><script>'
    assert "<script>" not in chart.lag_svg(pts)


@pytest.mark.parametrize("seconds,text", [(None, "—"), (0, "0 s"), (2.5, "2.5 s"), (59, "59 s"), (95, "1 m 35 s"),
                                          (7260, "2 h 1 m"), (90000, "1 d 1 h")])
def test_duration(seconds, text):
    assert views.duration(seconds) == text


def test_numbers_and_links():
    assert views.num(1234567) == "1,234,567" and views.num(None) == "—"
    assert views.file_url("/data/t/batch_id=3") == "file:///data/t/batch_id%3D3"
    assert views.file_url("s3://bucket/t/batch_id=3") == "s3://bucket/t/batch_id=3"
    assert views.ts("2030-01-01T01:02:03.456+00:00") == "2030-01-01 01:02:03"


def test_pages_escape_ledger_text():
    html = views.render("run.html", cfg=None, dag_id="<b>x</b>", run_id="r", batches=[], base="", spec="s")
    assert "<b>x</b>" not in html and re.search(r"&lt;b&gt;x&lt;/b&gt;", html)


def test_lag_svg_draws_a_gap_recorded_after_the_newest_batch():
    late = {"topic": "t", "partition": 1, "from_offset": 40, "until_offset": 90, "reason": "reset",
            "detected_at": "2030-01-01T05:00:00+00:00"}
    early = {**late, "detected_at": "2029-12-31T23:00:00+00:00"}  # before the oldest point: listed, not drawn
    svg = chart.lag_svg(_points(), [late, early])
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    [gap] = root.findall(f"{ns}line[@class='gap']")
    assert "[40, 90) reset" in gap.find(f"{ns}title").text
    assert float(gap.get("x1")) == chart.W - chart.PAD_R  # the axis now ends at the gap
    xs = [float(c.get("cx")) for c in root.findall(f"{ns}circle")]
    assert xs[0] == chart.PAD_L and xs[2] < float(gap.get("x1"))
    assert xs[2] == pytest.approx(chart.PAD_L + (chart.W - chart.PAD_L - chart.PAD_R) * 2 / 4)  # 03:00 of 01:00..05:00
    assert "2030-01-01 05:00:00 UTC" in svg


def test_assess_warns_of_records_waiting_behind_a_future_record():
    status = {**_status(12), "partitions": [{"topic": "t", "partition": 0, "lag_records": 12,
                                             "lag_note": "offset 300 is stamped 2099-01-01 00:00Z, in the future; "
                                                         "waiting since the frontier last moved"}]}
    state, found = health.assess(status, _summary(_batch()), [])
    assert state == "warning"
    assert found[0].text.startswith("t/0: 12 record(s) wait behind a record from the future (offset 300 is stamped "
                                    "2099-01-01 00:00Z"), found


def test_assess_a_missing_topic_is_an_error_saying_nothing_reads_or_fires():
    state, found = health.assess({"pipeline": "p", "missing": ["refunds"], "partitions": []}, {}, [])
    assert state == "error"
    assert found[0].text.startswith("refunds: not on the Kafka cluster; no run reads it and no lag trigger fires")
