"""A throwaway PostgreSQL cluster from Debian's packages, on a loopback port, for the ledger.

Installs the ``postgresql`` package if the server binaries are missing, creates a cluster in its
own data folder under ``.local/postgres`` (trust auth, 127.0.0.1 only) and starts it with
``pg_ctl``. PostgreSQL refuses to run as root, so as root the cluster is owned by and run as the
``postgres`` system user.
"""

from __future__ import annotations

import glob
import logging
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from offsetbatch.errors import OffsetbatchError
from offsetbatch.paths import local_dir

log = logging.getLogger(__name__)

DEFAULT_PORT = 54329


class PostgresError(OffsetbatchError):
    """The cluster could not be installed, created or started; the message says what to do."""


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _runuser() -> str:
    """util-linux's ``runuser`` (in /usr/sbin, which a root shell's PATH may lack), or a clear error."""
    found = shutil.which("runuser") or next((p for p in ("/usr/sbin/runuser", "/sbin/runuser") if os.access(p, os.X_OK)),
                                            None)
    if found is None:
        raise PostgresError("running as root, PostgreSQL must start as the 'postgres' user, through 'runuser' "
                            "(util-linux), which is not on PATH nor in /usr/sbin: install it with "
                            "'apt-get install util-linux', or run offsetbatch-stack as a user other than root.")
    return found


def ensure_installed() -> Path:
    """The server's bin folder, installing Debian's ``postgresql`` package first if needed."""
    bin_dir = _bin_dir()
    if bin_dir:
        return bin_dir
    if os.geteuid() != 0:
        raise PostgresError("PostgreSQL server binaries are missing; run 'sudo apt-get install postgresql'.")
    log.info("installing Debian package 'postgresql'")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "postgresql"], check=True, env=env)
    bin_dir = _bin_dir()
    if not bin_dir:
        raise PostgresError("apt-get installed 'postgresql' but no initdb was found under /usr/lib/postgresql.")
    return bin_dir


@dataclass
class PostgresCluster:
    port: int = DEFAULT_PORT
    home: Path | None = None

    def __post_init__(self) -> None:
        self.home = Path(self.home or local_dir() / "postgres")

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the ``postgres`` database."""
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *cmd: str) -> subprocess.CompletedProcess:
        if os.geteuid() == 0:  # the server refuses to run as root: as the postgres user Debian's package made
            cmd = (_runuser(), "-u", "postgres", "--", *cmd)
        return subprocess.run(cmd, capture_output=True, text=True)

    def start(self) -> None:
        bin_dir = ensure_installed()
        self.home.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.home, pw.pw_uid, pw.pw_gid)
        if not (self.data_dir / "PG_VERSION").exists():
            res = self._run(str(bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8")
            if res.returncode:
                raise PostgresError(f"initdb in {self.data_dir} failed:\n{res.stdout}{res.stderr}")
        if self._run(str(bin_dir / "pg_ctl"), "-D", str(self.data_dir), "status").returncode == 0:
            return
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.home} -c fsync=off -c max_connections=200"
        res = self._run(str(bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.home / "server.log"), "-w", "-t", "60", "-o", opts, "start")
        if res.returncode:
            log_tail = (self.home / "server.log").read_text(errors="replace")[-2000:] if (self.home / "server.log").exists() else ""
            raise PostgresError(
                f"PostgreSQL did not start on 127.0.0.1:{self.port} (is the port in use? set PG_PORT=...):\n{res.stderr}{log_tail}"
            )
        log.info("postgresql ready on 127.0.0.1:%d (data %s)", self.port, self.data_dir)

    def stop(self) -> None:
        bin_dir = _bin_dir()
        if bin_dir and (self.data_dir / "postmaster.pid").exists():
            self._run(str(bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop")

    def wipe(self) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)

    def create_database(self, name: str) -> str:
        """Create (or recreate empty) a database and return its SQLAlchemy URL."""
        import sqlalchemy as sa

        engine = sa.create_engine(self.url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        import sqlalchemy as sa

        engine = sa.create_engine(self.url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()
