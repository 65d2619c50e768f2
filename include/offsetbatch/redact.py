"""Secrets kept out of what offsetbatch prints, logs and renders: the password of a URL (a ledger's,
an Iceberg catalog's, one pasted into a path) becomes ``***``, whether the URL parses or not, so a
mistyped URL does not echo its password into an error, a DAG's import error or a page."""

from __future__ import annotations

import re

# scheme, then any slashes (a mistyped ``postgresql+psycopg2:/user:pw@host`` too), then user:password@
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*:/*)(?P<user>[^:/@\s'\"]*):(?P<password>[^@\s'\"]+)@")


def url(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``."""
    return _USERINFO.sub(lambda m: f"{m['head']}{m['user']}:***@", text)
