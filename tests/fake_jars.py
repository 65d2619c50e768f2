"""Jar files for tests of the jar checks (``offsetbatch.dag.spark_jars``): what the name and archive
checks look at, a zip with a manifest, and nothing Spark could load."""

from __future__ import annotations

import zipfile
from pathlib import Path


def fake_jar(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    return path
