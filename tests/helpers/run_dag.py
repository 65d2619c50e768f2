"""Run one DAG run in-process with real Airflow, as ``airflow dags test`` does, but with a chosen
``run_after`` so that running it again re-executes the *same* run (cleared, like "Clear" in the
UI) instead of creating a new one.

    python tests/helpers/run_dag.py DAG_FILE DAG_ID LOGICAL_DATE|none RUN_AFTER [CONF_JSON]

Only DAG_FILE is parsed, not the whole DAG folder.
Exit 0 when the run succeeded, 1 otherwise; prints ``DAGRUN <state> <run_id>`` last.
"""

import json
import sys
from datetime import datetime

from airflow.dag_processing.dagbag import DagBag


def main() -> int:
    dag_file, dag_id, logical, run_after = sys.argv[1:5]
    conf = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
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


if __name__ == "__main__":
    sys.exit(main())
