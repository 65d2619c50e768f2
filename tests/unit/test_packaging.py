"""The runtime ships and imports no development tooling: the wheel `pip wheel .` builds holds the
runtime package only, and nothing in the runtime (include/offsetbatch, dags, plugins, jobs) imports
offsetbatch_dev (scripts/dev, installed by `make setup` for people working on offsetbatch)."""

from __future__ import annotations

import ast
import importlib
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = [ROOT / "include" / "offsetbatch", ROOT / "dags", ROOT / "plugins", ROOT / "jobs"]
DEV = "offsetbatch_dev"
# Machine-local state and build leftovers: never part of the sources. A stale build/lib in
# particular goes into the next wheel as is (setuptools does not prune it), so it is left out.
NOT_SOURCES = (".git", ".venv", ".cache", ".local", "build", "dist", "*.egg-info", "__pycache__",
               ".pytest_cache", ".ruff_cache", "spark-warehouse", "metastore_db")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Iterator[zipfile.ZipFile]:
    """The runtime wheel as `pip wheel .` builds it, from a copy of the checkout (every source, no
    machine-local state), so the build neither writes build/ or *.egg-info into the shared working
    tree nor picks up a stale build/ from it. With the venv's own setuptools (pinned in
    requirements.txt), offline."""
    tmp = tmp_path_factory.mktemp("wheel")
    src, out = tmp / "src", tmp / "out"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}{res.stderr[-3000:]}"
    (built,) = out.glob("offsetbatch-*.whl")
    with zipfile.ZipFile(built) as zf:
        yield zf


def test_the_runtime_wheel_holds_the_runtime_package_only(wheel):
    names = wheel.namelist()
    dev = [n for n in names if n.startswith((f"{DEV}/", "offsetbatch/dev/"))]
    assert not dev, f"development tooling in the runtime wheel: {dev}"
    (dist_info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    top = {PurePosixPath(n).parts[0] for n in names}
    assert top == {"offsetbatch", dist_info}, f"the wheel holds more than the runtime package: {sorted(top)}"
    assert not [n for n in names if n.startswith(("tests/", "scripts/"))]
    assert "offsetbatch/job/run.py" in names, "the Spark job's body ships"
    assert "offsetbatch/job/spark_app/offsetbatch_job.py" in names, "the application spark-submit runs ships"
    templates = sorted(p.name for p in (ROOT / "include/offsetbatch/monitor/templates").glob("*.html"))
    assert templates, "the monitor's templates exist in the checkout"
    missing = [t for t in templates if f"offsetbatch/monitor/templates/{t}" not in names]
    assert not missing, f"the monitor pages' templates are missing from the wheel: {missing}"
    entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
    assert "offsetbatch = offsetbatch.ops.cli:main" in entry_points and "offsetbatch-stack" not in entry_points
    assert "[airflow.plugins]\noffsetbatch = offsetbatch.monitor.plugin:OffsetbatchUIPlugin" in entry_points


def _imports_of_dev(path: Path, base: Path = ROOT) -> list[str]:
    """`file:line: statement` of every import of offsetbatch_dev (or the old offsetbatch.dev), also
    by name through importlib.import_module / __import__."""
    def is_dev(name: str | None) -> bool:
        return name in (DEV, "offsetbatch.dev") or name.startswith((f"{DEV}.", "offsetbatch.dev."))

    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            names = [node.args[0].value]
        else:
            continue
        if any(is_dev(n) for n in names if isinstance(n, str)):
            found.append((node.lineno, f"{path.relative_to(base)}:{node.lineno}: {ast.unparse(node)}"))
    return [hit for _, hit in sorted(found)]


def test_nothing_in_the_runtime_imports_the_development_tooling():
    files = [p for folder in RUNTIME for p in sorted(folder.rglob("*.py"))]
    assert len(files) > 50 and all(folder.is_dir() for folder in RUNTIME)
    offenders = [hit for p in files for hit in _imports_of_dev(p)]
    assert not offenders, "the runtime imports development tooling:\n" + "\n".join(offenders)


def test_the_scan_sees_an_import_of_the_development_tooling(tmp_path):
    """The scan above is only as good as its matcher: each way of importing is caught, with its line."""
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nimport offsetbatch_dev\nfrom offsetbatch_dev.stack import cli\nimport importlib\n"
                     "importlib.import_module('offsetbatch_dev.demo')\nfrom offsetbatch.dev import x\n"
                     "from offsetbatch import dev\nfrom offsetbatch import paths\nfrom offsetbatch.devices import y\n")
    hits = _imports_of_dev(probe, tmp_path)
    assert [h.split(":")[:2] for h in hits] == [["probe.py", n] for n in ("2", "3", "5", "6", "7")], hits


def test_offsetbatch_stack_is_the_dev_projects_entry_point_and_importable():
    """`make setup` installs scripts/dev editable; its console script resolves to a function."""
    declared = tomllib.loads((ROOT / "scripts/dev/pyproject.toml").read_text())["project"]["scripts"]
    module, _, func = declared["offsetbatch-stack"].partition(":")
    assert module.startswith(f"{DEV}.") and callable(getattr(importlib.import_module(module), func))
    installed = importlib.metadata.entry_points(group="console_scripts", name="offsetbatch-stack")
    assert [(ep.dist.name, ep.value) for ep in installed] == [("offsetbatch-dev", declared["offsetbatch-stack"])]
