"""Run one DAG run in-process with real Airflow, as ``airflow dags test`` does, but with a chosen
``run_after`` so that running it again re-executes the *same* run (cleared, like "Clear" in the
UI) instead of creating a new one.

    python tests/helpers/run_dag.py DAG_FILE DAG_ID LOGICAL_DATE|none RUN_AFTER [CONF_JSON]
    python tests/helpers/run_dag.py --serve

Only DAG_FILE is parsed, not the whole DAG folder.
Exit 0 when the run succeeded, 1 otherwise; prints ``DAGRUN <state> <run_id>`` last.

``--serve`` imports Airflow once and forks a copy of itself per run (``harness.DagRunner``):
Airflow's import and its in-process execution API's cost about 12 s of a 2-core machine per
process, paid once instead of per run. It reads one JSON request a line on stdin (the arguments
above, the run's whole environment and a log file), runs it in a fork with that environment and
with its stdout and stderr (file descriptors, so subprocesses' too) sent to the log file, and
answers with a line ``RESULT <exit code>``. A request with ``argv`` instead runs that Airflow
command (``airflow ARGV``: the CLI's own parser and command, as ``airflow/__main__.py`` runs them),
its stdout to the log file and its stderr to ``err``. Each run starts from the same warm, never-used state,
as a fresh process would: no cache, connection or binding of one run reaches the next.
"""

import json
import logging
import os
import sys
from datetime import datetime

RESULT = "RESULT "


def run(dag_file: str, dag_id: str, logical: str, run_after: str, conf: dict) -> int:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=dag_file)
    if dag_id not in bag.dags:
        print(f"DAG {dag_id} not found; import errors: {bag.import_errors}")
        return 2
    dr = bag.dags[dag_id].test(
        logical_date=None if logical == "none" else datetime.fromisoformat(logical),
        run_after=datetime.fromisoformat(run_after),
        run_conf=conf or None,
    )
    print(f"DAGRUN {dr.state} {dr.run_id}")
    return 0 if str(dr.state) in ("success", "DagRunState.SUCCESS") else 1


def cli(argv: list[str]) -> int:
    """``airflow ARGV`` in this process, as ``airflow/__main__.py`` runs it; its exit code."""
    from airflow.cli import cli_parser
    from airflow.cli.utils import redirect_stdout_log_handlers_to_stderr

    try:
        args = cli_parser.get_parser().parse_args(argv)
        if hasattr(args, "output"):
            redirect_stdout_log_handlers_to_stderr()
        args.func(args)
    except SystemExit as exit_:
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
        return exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    return 0


def warm_up() -> None:
    """Do once, in the server, what every run's process would do first: import Airflow, the DAG
    factory, the operators and the clients their tasks use, and let the in-process execution API's
    app answer one request (it builds its versioned routes then: 7 s here). Its loop thread is shut
    down again before any fork, and nothing has connected: each run's client starts its own."""
    import gc
    import threading

    import httpx
    import pandas  # noqa: F401
    import pyspark.sql.connect.session  # noqa: F401
    from airflow import plugins_manager
    from airflow.api_fastapi.execution_api.app import InProcessExecutionAPI
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    import offsetbatch.dag.factory  # noqa: F401
    import offsetbatch.dag.operators.spark_connect  # noqa: F401
    import offsetbatch.dag.operators.spark_submit  # noqa: F401
    import offsetbatch.dag.tasks  # noqa: F401

    plugins_manager.ensure_plugins_loaded()
    throwaway = InProcessExecutionAPI(app=in_process_api_server().app)
    with httpx.Client(transport=throwaway.transport, base_url="http://in-process/execution/") as client:
        client.get("health")
    del throwaway, client
    gc.collect()  # the transport's finalizer stops its loop and joins its thread
    assert threading.active_count() == 1, f"a thread would not survive the fork: {threading.enumerate()}"


def serve() -> int:
    warm_up()
    answer = os.fdopen(os.dup(1), "w", buffering=1)  # the harness's pipe; fd 1 of each run goes to its log
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os._exit(_child(request))
        _, status = os.waitpid(pid, 0)
        answer.write(f"{RESULT}{os.waitstatus_to_exitcode(status)}\n")
    return 0


def _child(request: dict) -> int:
    """One run in a forked copy of the warm server: nothing of it is left for the next run, and a
    fault that kills its process (``point:kill``) kills this copy only."""
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path in ((1, request["log"]), (2, request.get("err"))):
        if path is None:  # stderr to the log file too, through the one open file (one offset)
            os.dup2(1, fd)
            continue
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    try:
        if "argv" in request:
            rc = cli(request["argv"])
        else:
            rc = run(request["dag_file"], request["dag_id"], request["logical"], request["run_after"], request["conf"])
    except BaseException:  # noqa: BLE001 - reported as the run's failure, in its log
        import traceback

        traceback.print_exc()
        rc = 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    return rc


def main() -> int:
    if sys.argv[1:] == ["--serve"]:
        return serve()
    dag_file, dag_id, logical, run_after = sys.argv[1:5]
    conf = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    return run(dag_file, dag_id, logical, run_after, conf)


if __name__ == "__main__":
    sys.exit(main())
