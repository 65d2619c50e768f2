"""``offsetbatch batches`` and ``offsetbatch batch`` after ledger maintenance summarized history: the
kept batches as before, one line saying what was summarized, and a summarized batch named as such."""

from __future__ import annotations

import json

from datetime import datetime, timezone
from pathlib import Path

from offsetbatch.ledger import Ledger
from offsetbatch.maintenance import ledger_actions
from offsetbatch.model import OffsetRange, TopicPartition
from offsetbatch.ops import cli
from offsetbatch.sinks.maintenance import Horizon

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _summarized(tmp_path: Path) -> Path:
    """``orders``: batches 1..3 published, 1 and 2 summarized (3 is named by both frontiers)."""
    url = f"sqlite:///{tmp_path}/ledger.db"
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "orders.yaml").write_text(f"name: orders\nkafka: {{topics: [t]}}\nsink: {{path: {tmp_path}/table}}\n"
                                        f'ledger: {{url: "{url}"}}\n')
    with Ledger(url, create=True) as led:
        with led.lock("orders") as conn:
            led.start_partitions(conn, "orders", {P0: 0, P1: 0}, "earliest")
        for planned in ([OffsetRange("t", 0, 0, 100, 0), OffsetRange("t", 1, 0, 50, 0)],
                        [OffsetRange("t", 0, 100, 200, 100)],
                        [OffsetRange("t", 0, 200, 250, 200), OffsetRange("t", 1, 50, 60, 50)]):
            with led.lock("orders") as conn:
                b = led.insert_batch(conn, "orders", "incremental", planned, dag_id="d", run_id=None,
                                     interval=(None, None), output_path=f"{tmp_path}/table")
                led.commit_batch(conn, b, {"rows_in": 1, "rows_out": 1}, {})
                led.mark_published(conn, "orders", b.batch_id)
        now = datetime.now(timezone.utc)
        for action in ledger_actions.actions(led, "orders", Horizon(now, now, now, now)):
            action.apply()
    return folder


def test_batches_lists_what_is_kept_and_one_line_for_the_summary(tmp_path, capsys):
    folder = _summarized(tmp_path)
    assert cli.main(["--pipelines", str(folder), "batches", "orders"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "2 batches before 3 summarized by maintenance (ids 1..2" in " ".join(out.split())
    assert "t/0 [0, 200), t/1 [0, 50)" in " ".join(out.split())
    assert cli.main(["--pipelines", str(folder), "--json", "batches", "orders"]) == cli.EXIT_OK
    assert [b["batch_id"] for b in json.loads(capsys.readouterr().out)] == [3]  # what is kept, and only that


def test_a_summarized_batch_is_named_as_such(tmp_path, capsys):
    folder = _summarized(tmp_path)
    code = cli.main(["--pipelines", str(folder), "batch", "orders", "1"])
    err = " ".join(capsys.readouterr().err.split())
    assert code != cli.EXIT_OK and "pipeline orders: batch(es) 1 were summarized by ledger maintenance" in err
