"""Check a values file for the official Apache Airflow Helm chart against the chart's own schema.

    python -m offsetbatch_dev.check_helm_values CHART/values.schema.json docs/kubernetes/airflow-values.yaml \\
        [--defaults CHART/values.yaml] [--chart-yaml CHART/Chart.yaml]

Two checks, both on the file as Helm would see it:

* **the schema** (``values.schema.json``, JSON Schema draft 7, with Python's ``jsonschema``). With
  ``--defaults`` the file is first merged into the chart's ``values.yaml`` the way Helm coalesces
  values (maps merge key by key, anything else replaces, ``null`` removes the chart's key), and the
  result is checked, as ``helm install`` does; without it, the file alone.
* **keys the schema does not describe.** The chart's schema leaves most objects open (the top level
  too): a misspelled key (``extraEnvfrom``) passes the schema and Helm ignores it. A key of the file
  under an object whose schema lists its keys, is not among them and is not allowed by a
  ``patternProperties`` or an ``additionalProperties`` schema, is reported. Free-form maps (``config``,
  ``labels``) are not checked that way.

Prints the chart's name, version and appVersion when given ``--chart-yaml``. Exits 0 when both checks
find nothing, 1 when either does, 2 when a file cannot be read. The chart itself is never part of this
repository: fetch it (``helm pull apache-airflow/airflow --version X --untar``) and point at it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Iterator

import yaml

EXIT_OK, EXIT_FOUND, EXIT_UNREADABLE = 0, 1, 2


def coalesce(user: dict[str, Any], chart: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of user values over the chart's: maps merge key by key, any other value
    replaces the chart's, and ``null`` deletes the chart's key."""
    merged = dict(chart)
    for key, value in user.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = coalesce(value, merged[key])
        else:
            merged[key] = value
    return merged


def schema_errors(schema: dict[str, Any], values: dict[str, Any]) -> list[str]:
    """Every JSON Schema error, as ``path: message`` lines, in document order of their paths."""
    from jsonschema import Draft7Validator

    validator = Draft7Validator(schema)
    errors = sorted(validator.iter_errors(values), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{_dotted(e.absolute_path) or '(top level)'}: {_short(e.message)}" for e in errors]


def undescribed_keys(schema: dict[str, Any], values: Any) -> list[str]:
    """Dotted paths of the keys the schema does not describe (see the module's docstring)."""
    return sorted(set(_walk(schema, schema, values, [])))


def _walk(root: dict[str, Any], node: Any, value: Any, path: list[str]) -> Iterator[str]:
    branches = list(_branches(root, node))
    if isinstance(value, dict):
        listed: dict[str, Any] = {}
        open_schemas: list[dict[str, Any]] = []
        patterns: list[str] = []
        lists_keys = closed = False
        for branch in branches:
            closed = closed or branch.get("additionalProperties") is False  # the schema check reports those
            if "properties" in branch:
                lists_keys = True
                for key, sub in branch["properties"].items():
                    listed.setdefault(key, sub)
            patterns += list(branch.get("patternProperties", {}))
            if isinstance(branch.get("additionalProperties"), dict):
                open_schemas.append(branch["additionalProperties"])
        for key, item in value.items():
            if key in listed:
                yield from _walk(root, listed[key], item, path + [str(key)])
            elif open_schemas:
                yield from _walk(root, open_schemas[0], item, path + [str(key)])
            elif lists_keys and not closed and not _matches_any(patterns, str(key)):
                yield _dotted(path + [str(key)])
    elif isinstance(value, list):
        for branch in branches:
            items = branch.get("items")
            if isinstance(items, dict):
                for i, item in enumerate(value):
                    yield from _walk(root, items, item, path + [f"[{i}]"])
                return


def _branches(root: dict[str, Any], node: Any, depth: int = 0) -> Iterator[dict[str, Any]]:
    """The schema node with its local ``$ref`` followed, and every ``allOf``/``anyOf``/``oneOf`` branch."""
    if not isinstance(node, dict) or depth > 20:
        return
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part.replace("~1", "/").replace("~0", "~"), {}) if isinstance(target, dict) else {}
        yield from _branches(root, target, depth + 1)
    yield node
    for combinator in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(combinator, []):
            yield from _branches(root, sub, depth + 1)


def _matches_any(patterns: list[str], key: str) -> bool:
    import re

    return any(re.search(p, key) for p in patterns)


def _dotted(path: Any) -> str:
    """``workers.celery.replicas``, ``secret[0].envName``: jsonschema's paths hold list indexes as ints."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith("["):
            out += str(part)
        else:
            out += f".{part}" if out else str(part)
    return out


def _short(message: str, limit: int = 300) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[:limit] + " …"


def _load_yaml(path: Path) -> Any:
    with path.open() as f:
        return yaml.safe_load(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offsetbatch_dev.check_helm_values",
                                     description="Check a values file for the official Airflow Helm chart against "
                                                 "the chart's values.schema.json.")
    parser.add_argument("schema", type=Path, help="the chart's values.schema.json")
    parser.add_argument("values", type=Path, help="the values file to check")
    parser.add_argument("--defaults", type=Path, help="the chart's values.yaml: check the values as Helm merges them")
    parser.add_argument("--chart-yaml", type=Path, help="the chart's Chart.yaml: print the version checked against")
    args = parser.parse_args(argv)

    try:
        schema = json.loads(args.schema.read_text())
        values = _load_yaml(args.values) or {}
        defaults = (_load_yaml(args.defaults) or {}) if args.defaults else None
        chart = (_load_yaml(args.chart_yaml) or {}) if args.chart_yaml else None
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"check_helm_values: cannot read an input: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    if not isinstance(values, dict):
        print(f"check_helm_values: {args.values} is not a YAML mapping", file=sys.stderr)
        return EXIT_UNREADABLE

    if chart is not None:
        print(f"chart {chart.get('name')} {chart.get('version')} (appVersion {chart.get('appVersion')}), "
              f"{args.chart_yaml}")
    checked = coalesce(values, defaults) if defaults is not None else values
    how = f"merged into {args.defaults}" if defaults is not None else "alone"
    errors = schema_errors(schema, checked)
    unknown = undescribed_keys(schema, values)
    print(f"{args.values} ({how}) against {args.schema}: {len(errors)} schema error(s), "
          f"{len(unknown)} key(s) the schema does not describe")
    for line in errors:
        print(f"  schema error at {line}")
    for key in unknown:
        print(f"  not described by the schema: {key}")
    return EXIT_FOUND if errors or unknown else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
