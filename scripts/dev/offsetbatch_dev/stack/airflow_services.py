"""Real Airflow services for the tests and the benchmarks: ``airflow api-server`` (+ scheduler,
+ triggerer) as subprocesses of one Airflow home, and a REST client of the API server. The
production path a run takes (LocalExecutor, the triggerer's watchers), started on 127.0.0.1 only."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


class AirflowRest:
    """A client of Airflow's REST API as user ``user``: one JWT from ``POST /auth/token``, reused
    (tokens live a day by default). Shared by the suite's own Airflow (``AirflowServices``) and the
    container stack's (tests/deploy)."""

    def __init__(self, url: str, user: str, password: str):
        self.url, self.user, self.password = url, user, password
        self._token: str | None = None

    def token(self) -> str:
        import urllib.request

        if self._token is None:
            req = urllib.request.Request(f"{self.url}/auth/token", method="POST",
                                         data=json.dumps({"username": self.user, "password": self.password}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as resp:
                self._token = json.loads(resp.read())["access_token"]
        return self._token

    def rest(self, method: str, path: str, body: dict | None = None, token: str | None = None) -> tuple[int, object]:
        """``(status, body)``: JSON decoded when the response says it is JSON, else text (the UI
        plugin's pages). ``token`` overrides the client's own (a bad one, to test refusals)."""
        import urllib.error
        import urllib.request

        req = urllib.request.Request(f"{self.url}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {token or self.token()}"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                status, raw, kind = resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            status, raw, kind = err.code, err.read(), err.headers.get("Content-Type", "")
        return status, (json.loads(raw or b"{}") if "json" in kind else raw.decode(errors="replace"))

    def runs(self, dag_id: str) -> list[dict]:
        """The DAG's runs from the REST API (run type and data interval included; ``run_id`` as an
        alias of ``dag_run_id``). Polling through the API, not ``airflow dags list-runs``, spares a
        CLI start-up (seconds of CPU on 2 cores) per poll. Every page of them."""
        runs: list[dict] = []
        while True:
            status, body = self.rest("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&offset={len(runs)}")
            if status == 404:
                return []
            assert status == 200, body
            runs += [{**r, "run_id": r["dag_run_id"]} for r in body["dag_runs"]]
            if not body["dag_runs"] or len(runs) >= body.get("total_entries", 0):
                return runs

    def wait_for_runs(self, dag_id: str, count: int, timeout_s: float = 600) -> list[dict]:
        """Wait until ``count`` runs exist and none is queued or running; returns them."""
        import time

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            runs = self.runs(dag_id)
            if len(runs) >= count and all(r["state"] in ("success", "failed") for r in runs):
                return runs
            time.sleep(2)  # poll interval
        raise TimeoutError(f"runs of {dag_id} not finished after {timeout_s}s: {self.runs(dag_id)}")


class AirflowServices(AirflowRest):
    """``airflow api-server`` (+ ``airflow scheduler``, + ``airflow triggerer``) as subprocesses
    (logs in ``root``), with Airflow's simple auth manager and one admin user for REST calls;
    ``auth=False`` is the simple auth manager's all-admins mode (no login)."""

    USER, PASSWORD = "admin", "offsetbatch-test"

    def __init__(self, env: dict, root: Path, port: int, scheduler: bool = True, auth: bool = True,
                 extra_env: dict | None = None, triggerer: bool = False):
        import secrets

        self.root, self.port = root, port
        super().__init__(f"http://127.0.0.1:{port}", self.USER, self.PASSWORD)
        root.mkdir(parents=True, exist_ok=True)
        (root / "passwords.json").write_text(json.dumps({self.USER: self.PASSWORD}))
        self.env = {**env,
                    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{self.USER}:admin",
                    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(root / "passwords.json"),
                    "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(port),
                    "AIRFLOW__API__BASE_URL": self.url,
                    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                    "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
                    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "AIRFLOW__CORE__PARALLELISM": "4",
                    "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
                    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": str(not auth), **(extra_env or {})}
        self.scheduler, self.triggerer = scheduler, triggerer
        self.procs: list[subprocess.Popen] = []

    def start(self, timeout_s: float = 180) -> None:
        import socket
        import time
        import urllib.request

        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                raise RuntimeError(f"port {self.port} is taken (an Airflow API server left by an interrupted test "
                                   f"session? 'pkill -f api_server'); the tests need it free")
        cmds = [["airflow", "api-server", "--host", "127.0.0.1", "--port", str(self.port)]]
        # Without their log servers: Airflow binds those to every interface, and the API server reads
        # the task logs from the shared log folder on this machine anyway.
        if self.scheduler:
            cmds.append(["airflow", "scheduler", "--skip-serve-logs"])
        if self.triggerer:
            cmds.append(["airflow", "triggerer", "--skip-serve-logs"])
        for cmd in cmds:
            self.procs.append(self._launch(cmd))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args} exited with {p.returncode}; see {self.root}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=2) as resp:
                    health = json.loads(resp.read())
                wanted = [c for c, on in (("scheduler", self.scheduler), ("triggerer", self.triggerer)) if on]
                if all(health.get(c, {}).get("status") == "healthy" for c in wanted):
                    return
            except OSError:
                pass
            time.sleep(0.5)  # polling interval of a readiness check, not a stand-in for one
        raise TimeoutError(f"Airflow API server/scheduler/triggerer not healthy after {timeout_s}s; see {self.root}")

    def _launch(self, cmd: list[str], again: bool = False) -> subprocess.Popen:
        log = open(self.root / f"{cmd[1]}.log", "a" if again else "w")
        return subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def log(self, component: str) -> str:
        """What ``airflow <component>`` has logged so far (``triggerer``, ``scheduler``)."""
        path = self.root / f"{component}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill_triggerer(self) -> None:
        """SIGKILL the triggerer and its children (no clean shutdown), then start a new one."""
        import os
        import signal

        [proc] = [p for p in self.procs if p.args[1] == "triggerer"]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self.procs[self.procs.index(proc)] = self._launch(["airflow", "triggerer", "--skip-serve-logs"], again=True)

    def stop(self) -> None:
        import os
        import signal

        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def airflow(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """``airflow ARGS`` against these services' metadata DB, asserting it succeeded (``check``)."""
        proc = self.run_cli(list(args))
        if check:
            assert proc.returncode == 0, f"airflow {' '.join(args)}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        return proc

    def run_cli(self, argv: list[str]) -> subprocess.CompletedProcess:
        """One Airflow command, in a new ``airflow`` process (the suite runs it in a warm one)."""
        return subprocess.run(["airflow", *argv], env=self.env, capture_output=True, text=True, timeout=300)
