"""The ``offsetbatch`` CLI in-process (``cli.main``) over a temporary pipelines folder and a real
SQLite ledger, with a stand-in for Kafka: one-line errors and their exit codes, positive limits,
reads that never create a ledger, the audit log (``events``) and the data lost in the last 24 h."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from offsetbatch.ledger import Ledger
from offsetbatch.ledger.schema import gaps
from offsetbatch.model import Gap, OffsetRange, TopicPartition
from offsetbatch.ops import cli
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan.request import ResetTarget
from offsetbatch.plan.reset import apply_reset, plan_reset
from offsetbatch.source.admin import KafkaAdmin, PartitionOffsets

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


class FakeKafka:
    """Log end 1000 on both partitions; no timestamps (lag in time unknown)."""

    bootstrap = "fake:9092"

    def partitions(self, topics=None, pattern=None):
        return {P0, P1}

    def offsets(self, tps, cut_timestamp_ms=None):
        return {tp: PartitionOffsets(0, 1000) for tp in tps}

    def offsets_for_time(self, tps, ms):
        return {tp: 0 for tp in tps}

    def timestamps_at(self, offsets):
        return {}

    def close(self):
        pass


def _folder(tmp_path: Path, ledger_url: str | None = None, conn_id: str | None = None) -> Path:
    folder = tmp_path / "pipelines"
    folder.mkdir(exist_ok=True)
    ledger = f'{{url: "{ledger_url}"}}' if ledger_url else f"{{conn_id: {conn_id}}}"
    (folder / "orders.yaml").write_text(f"name: orders\nkafka: {{topics: [t]}}\nsink: {{path: {tmp_path}/table}}\n"
                                        f"ledger: {ledger}\n")
    return folder


@pytest.fixture
def pipeline(tmp_path):
    """Folder and ledger of ``orders``: batches 1-2 committed, a forward reset by ``cli:tester``
    (reason "unit"), a retention gap skipped, batch 3 planned; one older gap from two days ago."""
    return _build_pipeline(tmp_path)


def _build_pipeline(tmp_path: Path) -> tuple[Path, str]:
    url = f"sqlite:///{tmp_path}/ledger.db"
    with Ledger(url, create=True) as led:
        with led.lock("orders") as conn:
            led.start_partitions(conn, "orders", {P0: 0, P1: 0}, "earliest")
        for planned in ([OffsetRange("t", 0, 0, 100, 0), OffsetRange("t", 1, 0, 50, 0)],
                        [OffsetRange("t", 0, 100, 200, 100)]):
            with led.lock("orders") as conn:
                b = led.insert_batch(conn, "orders", "incremental", planned, dag_id="offsetbatch_orders",
                                     run_id="scheduled__x", interval=(None, None), output_path=f"{tmp_path}/table")
                led.commit_batch(conn, b, {"rows_in": 1, "rows_out": 1}, {})
        with led.lock("orders") as conn:
            old = Gap("t", 1, 0, 7, reason="retention")
            led.record_gap(conn, "orders", old)
            conn.execute(gaps.update().where(gaps.c.until_offset == 7)
                         .values(detected_at=datetime.now(timezone.utc) - timedelta(days=2)))
        with led.lock("orders") as conn:
            plan = plan_reset(Pipeline(_cfg()), led, conn, FakeKafka(), ResetTarget("offsets", offsets={P0: 300}), False)
            apply_reset(led, conn, plan, actor="cli:tester", reason="unit")
        with led.lock("orders") as conn:
            led.skip_gap(conn, "orders", Gap("t", 1, 50, 60, reason="retention"))
        with led.lock("orders") as conn:
            led.insert_batch(conn, "orders", "incremental", [OffsetRange("t", 0, 300, 400, 300)],
                             dag_id="offsetbatch_orders", run_id="scheduled__y", interval=(None, None),
                             output_path=f"{tmp_path}/table")
    return _folder(tmp_path, url), url


def _cfg():
    from types import SimpleNamespace

    return SimpleNamespace(name="orders", kafka=SimpleNamespace(topics=["t"], pattern=None))


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_missing_or_empty_pipelines_folder_is_a_usage_error(tmp_path, capsys):
    code, out, err = _run(capsys, "--pipelines", str(tmp_path / "nope"), "status")
    assert code == cli.EXIT_USAGE and out == ""
    assert f"pipelines folder {tmp_path / 'nope'} does not exist" in _one_error_line(err)
    code, out, err = _run(capsys, "--pipelines", str(tmp_path), "--json", "status")
    assert code == cli.EXIT_USAGE and out == ""
    assert "holds no pipeline" in _one_error_line(err)


@pytest.mark.parametrize("argv", [("batches", "orders", "--limit", "-5"), ("batches", "orders", "--limit", "0"),
                                  ("events", "orders", "--limit", "ten"), ("status", "--batches", "0")])
def test_limits_must_be_positive(tmp_path, capsys, argv):
    code, out, err = _run(capsys, "--pipelines", str(_folder(tmp_path, f"sqlite:///{tmp_path}/l.db")), *argv)
    assert code == cli.EXIT_USAGE and out == ""
    assert "must be a positive integer" in err


@pytest.mark.parametrize("argv", [("status",), ("batches", "orders"), ("batch", "orders", "1"), ("events", "orders")])
def test_a_missing_ledger_is_one_line_exit_1_and_is_not_created(tmp_path, capsys, argv):
    db = tmp_path / "missing.db"
    code, out, err = _run(capsys, "--pipelines", str(_folder(tmp_path, f"sqlite:///{db}")), "--json", *argv)
    assert code == cli.EXIT_UNREACHABLE and out == ""
    line = _one_error_line(err)
    assert "pipeline orders: no offsetbatch ledger at" in line and str(db) in line
    assert not db.exists()


def test_a_damaged_ledger_is_one_line_naming_its_url(pipeline, capsys):
    folder, url = pipeline
    path = Path(sa.make_url(url).database)
    with sqlite3.connect(path) as db:  # the schema's own pages (page 1 and, as the schema grew, its leaves)
        keep = {n for (n,) in db.execute("SELECT pageno FROM dbstat WHERE name = 'sqlite_schema'")}
        size = db.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(path.read_bytes())
    for n in range(2, len(data) // size + 1):  # header and schema intact, every table page overwritten
        if n not in keep:
            data[(n - 1) * size:n * size] = b"A" * size
    path.write_bytes(bytes(data))
    for side in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        side.unlink(missing_ok=True)
    code, out, err = _run(capsys, "--pipelines", str(folder), "batches", "orders")
    assert code == cli.EXIT_UNREACHABLE and out == ""
    line = _one_error_line(err)
    assert f"pipeline orders: cannot read the ledger at {url}" in line and "malformed" in line

    path.write_bytes(b"not a database " * 100)  # not even a header
    code, out, err = _run(capsys, "--pipelines", str(folder), "events", "orders")
    assert code == cli.EXIT_UNREACHABLE and str(path) in _one_error_line(err)


def test_an_unreachable_ledger_server_is_one_line_without_its_password(tmp_path, capsys):
    folder = _folder(tmp_path, "postgresql+psycopg2://ob:s3cret@127.0.0.1:1/ledger")
    code, out, err = _run(capsys, "--pipelines", str(folder), "batches", "orders")
    assert code == cli.EXIT_UNREACHABLE and out == ""
    line = _one_error_line(err)
    assert "pipeline orders: cannot reach the ledger at postgresql+psycopg2://ob:***@127.0.0.1:1/ledger" in line
    assert "s3cret" not in err


def test_an_undefined_ledger_connection_is_a_config_error(tmp_path, capsys):
    code, _, err = _run(capsys, "--pipelines", str(_folder(tmp_path, conn_id="no_such_ledger_conn")), "batches", "orders")
    assert code == cli.EXIT_USAGE
    assert "pipeline orders: cannot resolve its ledger (ledger.conn_id 'no_such_ledger_conn')" in _one_error_line(err)


def test_reads_never_ask_for_a_new_ledger(pipeline, capsys, monkeypatch):
    asked = []
    real = Ledger.__init__

    def spy(self, url, create=False):
        asked.append(create)
        real(self, url, create)

    monkeypatch.setattr(Ledger, "__init__", spy)
    monkeypatch.setattr(KafkaAdmin, "for_connection", lambda conn_id, isolation_level=None: FakeKafka())
    folder, _ = pipeline
    for argv in (("status",), ("batches", "orders"), ("batch", "orders", "1"), ("events", "orders")):
        assert _run(capsys, "--pipelines", str(folder), "--json", *argv)[0] == cli.EXIT_OK, argv
    assert asked == [False] * 4


def test_events_show_when_who_and_why(pipeline, capsys):
    folder, _ = pipeline
    code, out, err = _run(capsys, "--pipelines", str(folder), "--json", "events", "orders")
    assert code == cli.EXIT_OK, err
    events = json.loads(out)
    assert [e["kind"] for e in events] == ["data_loss_skipped", "frontier_reset", "partition_started",
                                           "partition_started"]  # routine batch events left out
    skipped, reset = events[0], events[1]
    assert (reset["actor"], reset["reason"]) == ("cli:tester", "unit")
    assert datetime.fromisoformat(reset["at"]) > datetime.now(timezone.utc) - timedelta(minutes=5)
    assert reset["summary"] == "reset to offsets t/0@300: t/0 200→300"
    assert reset["detail"]["moves"][0]["to"] == 300
    assert skipped["summary"].startswith("t/1 [50, 60): 10 records deleted by retention")

    code, out, _ = _run(capsys, "--pipelines", str(folder), "--json", "events", "orders", "--all", "--limit", "3")
    assert [e["kind"] for e in json.loads(out)] == ["batch_planned", "data_loss_skipped", "frontier_reset"]

    code, out, _ = _run(capsys, "--pipelines", str(folder), "events", "orders")
    assert code == cli.EXIT_OK
    assert "frontier_reset" in out and "cli:tester" in out and "unit" in out and "t/0 200→300" in out


def test_status_shows_data_lost_in_the_last_24_hours(pipeline, capsys, monkeypatch):
    monkeypatch.setattr(KafkaAdmin, "for_connection", lambda conn_id, isolation_level=None: FakeKafka())
    folder, _ = pipeline
    code, out, err = _run(capsys, "--pipelines", str(folder), "--json", "status")
    assert code == cli.EXIT_OK, err
    [st] = json.loads(out)
    # the reset skipped t/0 [200, 300) and retention t/1 [50, 60); the gap of two days ago is not counted
    assert (st["gaps_24h"], st["records_lost_24h"]) == (2, 110)
    assert st["lag_records"] == (1000 - 300) + (1000 - 60)

    code, out, _ = _run(capsys, "--pipelines", str(folder), "status", "orders")
    assert code == cli.EXIT_OK
    assert "data lost in the last 24 h: 110 records in 2 gap(s)" in " ".join(out.split())


def test_a_config_that_does_not_load_stops_no_command_about_the_others(pipeline, capsys, monkeypatch):
    """One broken YAML next to a good one: commands about the good pipeline work (one warning line
    naming the file and field); a command over every pipeline answers for the good ones, then
    exits 2 so scripts see the broken config."""
    monkeypatch.setattr(KafkaAdmin, "for_connection", lambda conn_id, isolation_level=None: FakeKafka())
    folder, _ = pipeline
    (folder / "broken.yaml").write_text("name: broken\n")
    code, out, err = _run(capsys, "--pipelines", str(folder), "--json", "status", "orders")
    assert code == cli.EXIT_OK and [st["pipeline"] for st in json.loads(out)] == ["orders"]
    [warning] = err.strip().splitlines()
    assert warning.startswith("warning: ") and "broken.yaml" in warning and "field 'kafka'" in warning
    code, out, err = _run(capsys, "--pipelines", str(folder), "--json", "status")
    assert code == cli.EXIT_USAGE and [st["pipeline"] for st in json.loads(out)] == ["orders"]
    assert "broken.yaml" in err
    code, out, err = _run(capsys, "--pipelines", str(folder), "--json", "status", "broken")
    assert code == cli.EXIT_NOT_FOUND and out == "" and "1 config file(s) do not load (warned above)" in err


def test_the_ui_looks_for_audit_events_among_the_newest_events_only(pipeline):
    from offsetbatch.ledger import queries

    _, url = pipeline
    with Ledger(url) as led:  # newest events: batch_planned(3), data_loss_skipped, frontier_reset, ...
        assert [e["kind"] for e in queries.event_rows(led, "orders", 20, window=3)] == ["data_loss_skipped",
                                                                                       "frontier_reset"]
        assert [e["kind"] for e in queries.event_rows(led, "orders", 20, window=2)] == ["data_loss_skipped"]
        assert len(queries.event_rows(led, "orders", 20, window=1000)) == 4


# ---- bad input: one `error:` line and the table's exit code, before the ledger or Kafka is asked -----

BIG = "12345678901234567890123"  # 23 digits: the ledger's BIGINT overflowed in the driver (a 37-line traceback)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """The ``pipeline`` fixture's ledger file, built once for this module's many refusal cases."""
    _, url = _build_pipeline(tmp_path_factory.mktemp("pristine"))
    return Path(sa.make_url(url).database)


@pytest.fixture
def pipeline_copy(pristine, tmp_path) -> tuple[Path, str]:
    """What ``pipeline`` gives, on a copy of the pristine ledger (no WAL left beside a closed ledger)."""
    import shutil

    assert not Path(f"{pristine}-wal").exists()
    shutil.copy(pristine, tmp_path / "ledger.db")
    url = f"sqlite:///{tmp_path}/ledger.db"
    return _folder(tmp_path, url), url
T1, T2 = "2026-11-20T13:00:00+00:00", "2026-11-20T15:00:00+00:00"


@pytest.mark.parametrize("argv, code, named", [
    (("batch", "orders", BIG), 4, f"pipeline orders: batch id {BIG} is out of range: batch ids are 1 to "
                                  f"9223372036854775807 ('offsetbatch batches orders' lists them). Nothing was changed."),
    (("batch", "orders", "-5"), 4, "pipeline orders: batch id -5 is not valid (ids start at 1)"),
    (("batch", "orders", "0"), 4, "batch id 0 is not valid"),
    (("batch", "orders", "abc"), 2, "offsetbatch batch: argument batch_id: invalid int value: 'abc'"),
    (("replay", "orders", "--batch", BIG), 4, f"pipeline orders: batch id {BIG} is out of range"),
    (("replay", "orders", "--batch", "1", "--batch", BIG), 4, f"batch id {BIG} is out of range"),
    # the window used to be dropped silently
    (("replay", "orders", "--batch", "1", "--from", T1, "--to", T2), 2,
     f"replay orders: give batch ids (--batch N, repeatable) or a window (--from TS --to TS), not both; got --batch 1 "
     f"and --from {T1} --to {T2}. Nothing was done."),
    (("replay", "orders", "--batch", "1", "--to", T2), 2, f"not both; got --batch 1 and --to {T2}"),
    (("replay", "orders", "--from", T1), 2, "give batch ids (--batch N, repeatable) or both --from TS and --to TS "
                                            "(got only --from)"),
    (("replay", "orders"), 2, "give batch ids (--batch N, repeatable) or both --from TS and --to TS. Nothing was done."),
    (("replay", "orders", "--from", "0001-01-01T00:00:00+00:00", "--to", T2), 4,
     "pipeline orders: replay_start '0001-01-01T00:00:00+00:00' is before 1970-01-01T00:00:00+00:00"),
    (("replay", "orders", "--from", T1, "--to", "9999-12-31T23:59:59+00:00"), 4,
     "replay_end '9999-12-31T23:59:59+00:00' is after 9999-01-01T00:00:00+00:00"),
    (("replay", "orders", "--from", "2026-11-20T13:00:00", "--to", T2), 4,
     "replay_start '2026-11-20T13:00:00' has no timezone"),
    (("reset", "orders", "--to", "0001-01-01T00:00:00+00:00", "--apply", "--allow-rewind"), 4,
     "pipeline orders: reset_to '0001-01-01T00:00:00+00:00' is before 1970-01-01T00:00:00+00:00"),
    (("reset", "orders", "--to", "9999-12-31T23:59:59+00:00", "--apply", "--allow-data-loss"), 4,
     "reset_to '9999-12-31T23:59:59+00:00' is after 9999-01-01"),
    (("reset", "orders", "--to", "2026-11-20T13:00:00", "--apply"), 4, "reset_to '2026-11-20T13:00:00' has no timezone"),
    (("reset", "orders", "--to", "not json", "--apply"), 4, "reset_to 'not json' is not an ISO-8601 timestamp"),
    (("reset", "orders", "--to", '{"t": {"0": -1}}', "--apply"), 4,
     "reset_to['t']['0'] = -1 is not an offset (an integer from 0 to 9223372036854775807)"),
    (("reset", "orders", "--to", '{"t": {"x": 1}}', "--apply"), 4, "reset_to['t'] has partition 'x', not a number"),
    (("reset", "orders", "--to", f'{{"t": {{"0": {BIG}}}}}', "--apply"), 4, f"reset_to['t']['0'] = {BIG} is not an offset"),
    (("reset", "orders", "--to", '{"t": {"99999999999": 1}}', "--apply"), 4,
     "reset_to['t'] has partition '99999999999', not a Kafka partition number (0 to 2147483647)"),
    (("reset", "orders", "--to", '{"t": {"0": 5'), 4, "reset_to is malformed JSON"),
    (("batches", "orders", "--limit", BIG), 2,
     f"offsetbatch batches: argument --limit: must be a positive integer up to 9223372036854775807, got '{BIG}'"),
    (("status", "--batches", BIG), 2, "argument --batches: must be a positive integer up to 9223372036854775807"),
    (("events", "orders", "--limit", "-5"), 2, "argument --limit: must be a positive integer, got '-5'"),
    (("frobnicate",), 2, "offsetbatch: argument command: invalid choice: 'frobnicate'"),
    ((), 2, "offsetbatch: the following arguments are required: command"),
])
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_bad_input_is_one_error_line_and_changes_nothing(pipeline_copy, capsys, monkeypatch, argv, code, named,
                                                        as_json):
    """Each used to be a traceback (OverflowError, ValueError: OffsetTimestamp(...)), a silent
    success (--batch with a window) or argparse's two-line usage error."""
    import sqlite3

    folder, url = pipeline_copy
    db = sa.make_url(url).database
    before = list(sqlite3.connect(db).iterdump())
    asked = []
    monkeypatch.setattr(Ledger, "__init__", lambda self, *a, **k: asked.append("ledger") or pytest.fail("ledger opened"))
    monkeypatch.setattr(KafkaAdmin, "for_connection", lambda *a, **k: asked.append("kafka") or pytest.fail("Kafka asked"))
    got, out, err = _run(capsys, "--pipelines", str(folder), *(["--json"] if as_json else []), *argv)
    line = _one_error_line(err)
    assert (got, out) == (code, ""), err
    assert named in line, line
    assert asked == [] and list(sqlite3.connect(db).iterdump()) == before


def test_the_limits_themselves_are_accepted(pipeline, capsys):
    folder, _ = pipeline
    code, out, err = _run(capsys, "--pipelines", str(folder), "--json", "batches", "orders", "--limit", str(2**63 - 1))
    assert code == cli.EXIT_OK and [b["batch_id"] for b in json.loads(out)] == [3, 2, 1], err
    code, out, err = _run(capsys, "--pipelines", str(folder), "--json", "batch", "orders", str(2**63 - 1))
    assert code == cli.EXIT_NOT_FOUND and out == ""
    assert f"batch {2**63 - 1} does not exist in the ledger" in _one_error_line(err)


# ---- stdout holds only the output: Airflow's log lines (the secrets masker's) go elsewhere -------------

def _short_password_pipeline(tmp_path, monkeypatch, url: str) -> Path:
    """``orders`` with its ledger and Kafka behind Airflow connections whose passwords are 2
    characters: Airflow's secrets masker warns that it cannot mask them ("too short")."""
    folder = tmp_path / "short"
    folder.mkdir()
    (folder / "orders.yaml").write_text(f"name: orders\nkafka: {{topics: [t], conn_id: ob_short_kafka}}\n"
                                        f"sink: {{path: {tmp_path}/table}}\nledger: {{conn_id: ob_short_ledger}}\n")
    monkeypatch.setenv("AIRFLOW_CONN_OB_SHORT_LEDGER", json.dumps(
        {"conn_type": "sqlite", "host": sa.make_url(url).database, "password": "pw"}))
    monkeypatch.setenv("AIRFLOW_CONN_OB_SHORT_KAFKA", json.dumps(
        {"conn_type": "kafka", "login": "ob", "password": "pw",
         "extra": {"bootstrap.servers": "fake:9092", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}}))
    return folder


def test_json_stays_json_with_a_short_connection_password(pipeline, tmp_path, capsys, monkeypatch):
    """A 2-character password made Airflow's secrets masker log "Skipping masking for a secret as it's
    too short (<5 chars)" on stdout, before the JSON. Here its once-per-process warning is re-armed,
    and a logger with a handler on stdout (as Airflow's root handler is in a fresh process) logs while
    the connection is read: stdout parses, the masker's warning is muted, the other line is on stderr."""
    import logging
    import sys

    from airflow.sdk._shared.secrets_masker.secrets_masker import SecretsMasker

    from offsetbatch.source.connection import from_connection

    _, url = pipeline
    folder = _short_password_pipeline(tmp_path, monkeypatch, url)
    monkeypatch.setattr(SecretsMasker, "_has_warned_short_secret", False)
    airflow_like = logging.getLogger("offsetbatch_tests.airflow_like")
    on_stdout = logging.StreamHandler(sys.stdout)
    monkeypatch.setattr(airflow_like, "handlers", [on_stdout])
    monkeypatch.setattr(airflow_like, "propagate", False)
    monkeypatch.setattr(airflow_like, "level", logging.INFO)
    read = []

    def kafka(conn_id, isolation_level=None):
        read.append(from_connection(conn_id).describe())  # reads the connection: the masker sees "pw"
        airflow_like.warning("a log line while reading a connection")
        return FakeKafka()

    monkeypatch.setattr(KafkaAdmin, "for_connection", kafka)
    code, out, err = _run(capsys, "--pipelines", str(folder), "--json", "status")
    assert code == cli.EXIT_OK, err
    [st] = json.loads(out)
    assert st["pipeline"] == "orders" and read == ["connection 'ob_short_kafka' (SASL_PLAINTEXT as ob, fake:9092)"]
    assert SecretsMasker._has_warned_short_secret  # the masker did warn: not on stdout, not on stderr either
    assert "too short" not in out + err and err == "a log line while reading a connection\n"
    assert on_stdout.stream is sys.stdout  # put back after the command

    code, out, err = _run(capsys, "--pipelines", str(folder), "--json", "batch", "orders", "99")
    assert code == cli.EXIT_NOT_FOUND and out == ""
    assert "batch 99 does not exist" in _one_error_line(err)


def test_json_stays_json_with_a_short_connection_password_in_a_fresh_process(pipeline, tmp_path, monkeypatch):
    """The same through the installed command's code in a new interpreter: Airflow sets up its own
    logging there (on stdout), as it does for an operator."""
    import os
    import subprocess
    import sys

    _, url = pipeline
    folder = _short_password_pipeline(tmp_path, monkeypatch, url)
    res = subprocess.run([sys.executable, "-m", "offsetbatch.ops.cli", "--pipelines", str(folder), "--json", "batches",
                          "orders"], env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert res.returncode == cli.EXIT_OK, res.stderr[-3000:]
    assert [b["batch_id"] for b in json.loads(res.stdout)] == [3, 2, 1]
    assert res.stderr == ""


def test_pools_prints_one_single_slot_pool_per_pipeline_and_names_a_broken_config(tmp_path, capsys):
    """`offsetbatch pools` is what make setup, compose's airflow-init and users feed to
    `airflow pools import`: JSON on stdout only, a config that does not load named on stderr."""
    folder = _folder(tmp_path, f"sqlite:///{tmp_path}/l.db")
    (folder / "broken.yaml").write_text("name: broken\nkafka: {topics: []}\n")
    code, out, err = _run(capsys, "--pipelines", str(folder), "pools")
    assert code == cli.EXIT_OK
    assert json.loads(out) == {"offsetbatch_orders": {"slots": 1, "include_deferred": False,
                                                      "description": "offsetbatch pipeline orders: one task at a time"}}
    assert "no pool (and no DAG) until this is fixed" in err and "broken.yaml" in err


def test_pools_of_a_folder_that_is_not_there_fails(tmp_path, capsys):
    """Issue 41, case 15: a mistyped folder exited 0 with no pool, and setup carried on."""
    code, out, err = _run(capsys, "--pipelines", str(tmp_path / "no_such_folder"), "pools")
    assert code == cli.EXIT_USAGE and json.loads(out) == {}
    assert "no_such_folder" in err and "no pool (and no DAG) until this is fixed" in err
