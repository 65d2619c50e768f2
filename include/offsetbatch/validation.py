"""Checks of the parts of a pipeline config that are code: the value schema (Spark DDL), the
transform (Spark SQL or a Python callable) and the Airflow schedule (cron).

They run when the config is loaded (``offsetbatch.config`` validators), so a typo fails at DAG
parse, naming the file and the field, instead of after a batch was planned and Spark had read
Kafka. Each function is pure apart from importing a Python transform, and raises ``ValueError``
with a message saying what is wrong and what to write instead; ``config`` adds the file and the
field. The Spark job still analyzes the transform against the real columns before it reads
anything (``job.transform.analyzed_transform``), which catches what a parser cannot (unknown columns).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from sqlglot import exp

DIALECT = "spark"
VIEW = "records"  # the view the job registers the parsed records as (job/transform.py)
_DDL_PREFIX = "CREATE TABLE t ("  # a DDL column list parses as the column list of this statement
_TYPES_HINT = "e.g. 'id STRING, n INT, amount DECIMAL(10,2), tags ARRAY<STRING>, at TIMESTAMP'"


def _parse_error(exc: Exception, what: str, col_shift: int = 0, hint: str = "") -> ValueError:
    """sqlglot's error as one line with line and column (without its terminal colour codes)."""
    errors = getattr(exc, "errors", None)
    if not errors:  # a TokenError: sqlglot names no position, only the text up to the bad token
        return ValueError(f"not valid {what}: {str(exc).splitlines()[0]} (an unclosed quote, backtick or comment?)"
                          + (f"; {hint}" if hint else ""))
    err = errors[0]
    line, col, near = err.get("line"), err.get("col"), err.get("highlight") or ""
    if col and near and "\n" not in near:
        col = col - len(near) + 1  # sqlglot reports where the offending token ends; users look for its start
    if line == 1 and col:
        col = max(1, col - col_shift)
    where = f" at line {line}, column {col}" if line and col else ""
    description = re.sub(r"<class '[\w.]+\.(\w+)'>", lambda m: m.group(1).upper(), str(err.get("description", exc)))
    return ValueError(f"not valid {what}: {description}{where}" + (f", near {near!r}" if near else "")
                      + (f"; {hint}" if hint else ""))


class _NoCommandFallbackWarning(logging.Filter):
    """sqlglot logs "... Falling back to parsing as a 'Command'" (quoting our wrapped DDL) before it
    raises; the ``ValueError`` says it better, so keep that line out of DAG import logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


def _parse(sql: str, what: str, col_shift: int = 0, hint: str = "") -> list["exp.Expression | None"]:
    """Parse with the Spark dialect, turning sqlglot's errors into one readable ``ValueError``."""
    import sqlglot
    from sqlglot.errors import ErrorLevel, SqlglotError

    quiet = _NoCommandFallbackWarning()
    logging.getLogger("sqlglot").addFilter(quiet)
    try:
        return sqlglot.parse(sql, read=DIALECT, error_level=ErrorLevel.RAISE)
    except SqlglotError as exc:
        raise _parse_error(exc, what, col_shift, hint) from None
    finally:
        logging.getLogger("sqlglot").removeFilter(quiet)


# Spark SQL that reaches past the records: into the JVM (any Java method: System.getenv reads the
# job's environment), a program on the job's hosts (TRANSFORM ... USING 'cat /etc/x') or a table
# other than the records: a path queried as a table (parquet.`/etc/x`, or the source named by its
# class), a catalog table, another session's global_temp view. A name with a qualifier is never the
# records; the job refuses what this text check cannot name, on Spark's analyzed plan (job.reads).
SYSTEM_FUNCTIONS = frozenset({"reflect", "try_reflect", "java_method", "read_files"})
# Functions whose value differs each time a batch runs: a replay of the batch writes other values.
NONDETERMINISTIC = frozenset({"rand", "randn", "random", "uuid", "shuffle", "current_timestamp", "now",
                              "current_date", "curdate", "localtimestamp", "monotonically_increasing_id"})


def _query(sql: str) -> "exp.Query":
    from sqlglot import exp

    if not sql.strip():
        raise ValueError("is empty; write a query such as 'SELECT * FROM records', or remove 'sql' to keep the "
                         "parsed records unchanged")
    statements = [s for s in _parse(sql, "Spark SQL", hint=f"write one query over the view '{VIEW}'") if s is not None]
    if len(statements) != 1:
        raise ValueError(f"must be exactly one query (SELECT ... FROM {VIEW}), found {len(statements)} statements")
    query = statements[0]
    if not isinstance(query, exp.Query):
        raise ValueError(f"must be a query (SELECT ... FROM {VIEW}), got {query.key.upper()} "
                         f"{query.sql(dialect=DIALECT)[:60]!r}")
    if not any(t.name.lower() == VIEW for t in query.find_all(exp.Table)):
        raise ValueError(f"does not read the view '{VIEW}' (the parsed Kafka records): write "
                         f"'SELECT ... FROM {VIEW} ...'")
    return query


def check_transform_sql(sql: str) -> str:
    """Raise ``ValueError`` unless ``sql`` is one Spark SQL query that reads the view ``records``.

    Only syntax is checked here (sqlglot's Spark dialect); column names are checked by the job's
    analysis on an empty frame before it reads Kafka. Returns a one-line description."""
    _query(sql)
    return f"a Spark SQL query over '{VIEW}'"


def sql_functions(sql: str) -> set[str]:
    """The lower-case names of the functions a (valid) query calls."""
    from sqlglot import exp

    return {(f.name if isinstance(f, exp.Anonymous) else f.sql_name()).lower() for f in _query(sql).find_all(exp.Func)}


def check_system_access(sql: str) -> None:
    """Raise ``ValueError`` when the query reaches the JVM, a program or files on the job's hosts, or a
    table other than the records (``SYSTEM_FUNCTIONS``, ``TRANSFORM ... USING``, a qualified table
    name such as a path read as a table or a catalog table): a pipeline author could copy the job's
    environment, a host's files or other tables into the output. The early, friendly form of the
    job's own check on Spark's plan (``job.reads``), which holds for spellings this one cannot see."""
    from sqlglot import exp

    query = _query(sql)
    called = sorted(sql_functions(sql) & SYSTEM_FUNCTIONS)
    scripts = [f"TRANSFORM ... USING {t.args['command_script'].sql(dialect=DIALECT)}"
               for t in query.find_all(exp.QueryTransform) if t.args.get("command_script") is not None]
    tables = list(query.find_all(exp.Table))
    files = sorted(_qualified_table(t) for t in tables if t.args.get("db") or t.args.get("catalog"))
    files += sorted(named for t in tables if (named := _identifier_table(t)))
    variables = sorted(set(VARIABLE.findall(sql)))
    reaching = [f"{name}(...)" for name in called] + scripts + variables
    parts = ([f"reaches past the records into the JVM or the job hosts' files ({', '.join(reaching)})"] if reaching
             else []) + ([f"reads tables other than the view '{VIEW}' ({', '.join(files)})"] if files else [])
    if parts:
        raise ValueError(f"{'; '.join(parts)}: such SQL can read the job's environment, any file its user may read "
                         f"and any table its Spark session can. Read only the view '{VIEW}', or set "
                         f"transform.allow_system_access: true if this pipeline's SQL is trusted")


def _qualified_table(table: "exp.Table") -> str:
    """A qualified table as written: ``text.`/etc/x```, ``global_temp.`v```, ``spark_catalog.default.`t```."""
    return ".".join([*(p if re.fullmatch(r"\w+", p) else f"`{p}`" for p in (table.catalog, table.db) if p),
                     f"`{table.name}`"])


# Spark's variable substitution (``${env:NAME}``, ``${system:name}``, ``${spark.conf}``) would put the
# job's environment into the output; the job turns it off (``spark.sql.variable.substitute``) unless
# transform.allow_system_access, and such SQL is refused at load like the functions above.
VARIABLE = re.compile(r"\$\{[^}]*\}")


def _identifier_table(table: "exp.Table") -> str | None:
    """``IDENTIFIER('text.`/etc/hostname`')`` as a table is a qualified table too: named when its text
    has a qualifier (or is not a literal at all, so nobody can tell)."""
    from sqlglot import exp

    func = table.this
    if not (isinstance(func, exp.Anonymous) and func.name.lower() == "identifier"):
        return None
    arg = func.expressions[0] if func.expressions else None
    if not (isinstance(arg, exp.Literal) and arg.is_string):
        return "IDENTIFIER(<an expression>)"
    try:
        parts = exp.to_table(arg.this, dialect=DIALECT)
    except Exception:  # noqa: BLE001 - not a name sqlglot can read: Spark may still read it, so name it
        return f"IDENTIFIER({arg.this!r})"
    return f"IDENTIFIER({arg.this!r})" if parts.args.get("db") or parts.args.get("catalog") else None


def nondeterministic_functions(sql: str) -> list[str]:
    """The functions of ``NONDETERMINISTIC`` a query calls: each execution of a batch gives other values."""
    return sorted(sql_functions(sql) & NONDETERMINISTIC)


def check_schema_ddl(ddl: str, reserved: Iterable[str] = ()) -> list[str]:
    """Raise ``ValueError`` unless ``ddl`` is a Spark column list ('name TYPE, ...'), parsed as the
    columns of ``CREATE TABLE t (<ddl>)``. ``reserved`` names the columns the job adds itself
    (Kafka metadata, ``value``, ``_error``): a field with such a name would shadow or silently
    replace one of them. Returns the field names."""
    from sqlglot import exp

    if not ddl.strip():
        raise ValueError(f"is empty; give Spark column definitions, {_TYPES_HINT}")
    hint = f"write 'name TYPE, ...' with Spark types, {_TYPES_HINT}; quote names that are SQL keywords with backticks"
    _one_column_list(ddl, hint)
    # The newline keeps a trailing '-- comment' in the DDL from swallowing the closing parenthesis.
    statements = [s for s in _parse(f"{_DDL_PREFIX}{ddl}\n)", "Spark DDL", len(_DDL_PREFIX), hint) if s is not None]
    create = statements[0] if len(statements) == 1 else None
    if (not isinstance(create, exp.Create) or not isinstance(create.this, exp.Schema)
            or create.args.get("expression") is not None):
        raise ValueError(f"is not a list of column definitions, {_TYPES_HINT}")
    _spark_type_bounds(create.this)
    names: list[str] = []
    for column in create.this.expressions:
        if not isinstance(column, exp.ColumnDef) or column.args.get("kind") is None:
            raise ValueError(f"column {column.sql(dialect=DIALECT)!r} has no type, {_TYPES_HINT}")
        names.append(column.name)
    if not names:
        raise ValueError(f"declares no columns, {_TYPES_HINT}")
    _no_duplicates(names, reserved)
    return names


MAX_DECIMAL_PRECISION = 38  # Spark's DecimalType.MAX_PRECISION


def _spark_type_bounds(columns: "exp.Schema") -> None:
    """Types sqlglot parses but Spark refuses when the job starts: DECIMAL(p, s) needs
    1 <= p <= 38 and 0 <= s <= p."""
    from sqlglot import exp

    for dtype in columns.find_all(exp.DataType):
        if dtype.this != exp.DataType.Type.DECIMAL or not dtype.expressions:
            continue
        try:
            bounds = [int(e.name) for e in dtype.expressions]
        except ValueError:
            raise ValueError(f"{dtype.sql(dialect=DIALECT)} needs whole numbers: DECIMAL(precision, scale)") from None
        precision, scale = bounds[0], (bounds[1] if len(bounds) > 1 else 0)
        if not 1 <= precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
            raise ValueError(f"{dtype.sql(dialect=DIALECT)} is not a Spark decimal: precision 1..{MAX_DECIMAL_PRECISION} "
                             f"and scale 0..precision, e.g. DECIMAL(10,2)")


def _one_column_list(ddl: str, hint: str) -> None:
    """The DDL is parsed inside ``CREATE TABLE t (...)``: refuse what would escape those
    parentheses or end the statement, and empty definitions (',,', a trailing ','), which
    sqlglot tolerates but Spark does not."""
    from sqlglot.dialects.spark import Spark
    from sqlglot.errors import SqlglotError
    from sqlglot.tokens import TokenType

    try:
        tokens = Spark().tokenize(ddl)
    except SqlglotError as exc:
        raise _parse_error(exc, "Spark DDL", hint=hint) from None
    if not tokens:
        raise ValueError(f"declares no columns, {_TYPES_HINT}")
    depth, previous = 0, TokenType.COMMA  # as if a comma came first: a leading ',' is an empty definition
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            raise ValueError(f"must be one column list without ';' (line {tok.line}, column {tok.col})")
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tok.token_type, 0)
        if depth < 0:
            raise ValueError(f"has an unmatched ')' at line {tok.line}, column {tok.col}")
        if tok.token_type == TokenType.COMMA and previous == TokenType.COMMA:
            raise ValueError(f"has an empty column definition (',,' or a leading ',') at line {tok.line}, "
                             f"column {tok.col}")
        previous = tok.token_type
    if previous == TokenType.COMMA:
        raise ValueError("ends with ','; remove it or add the missing column definition")


def _no_duplicates(names: list[str], reserved: Iterable[str]) -> None:
    """Spark resolves names case-insensitively: two fields (or a field and a column the job adds)
    that differ only in case are the same column, and one of them would be lost."""
    seen: dict[str, str] = {r.lower(): r for r in reserved}
    taken_by_job = set(seen)
    for name in names:
        key = name.lower()
        if key in taken_by_job:
            raise ValueError(f"field '{name}' clashes with the column '{seen[key]}' the job adds to every record; "
                             f"rename it in the schema (the transform can alias it back)")
        if key in seen:
            raise ValueError(f"field '{name}' is declared twice (names are case-insensitive in Spark)")
        seen[key] = name


def check_python_callable(path: str) -> Callable:
    """Raise ``ValueError`` unless ``path`` ('module.function') imports and names a callable, so a
    typo fails at DAG parse rather than in the Spark job. Returns the callable."""
    module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"must be a dotted path 'module.function', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - a module can raise anything at import; the user needs the text
        raise ValueError(f"cannot import module {module_name!r} ({type(exc).__name__}: {exc}); install it or put "
                         f"it on the PYTHONPATH of Airflow and of the Spark job, or fix the path") from None
    if not hasattr(module, attr):
        raise ValueError(f"module {module_name!r} ({getattr(module, '__file__', None) or 'no file'}) has no "
                         f"attribute {attr!r}; fix the function name")
    fn = getattr(module, attr)
    if not callable(fn):
        raise ValueError(f"{path!r} is a {type(fn).__name__}, not a function taking and returning a DataFrame")
    if module_name.partition(".")[0] in sys.stdlib_module_names or inspect.isbuiltin(fn):
        raise ValueError(f"{path!r} is part of Python itself, not a transform: transform.python names a function of "
                         f"yours (module.function) that takes the records' DataFrame and returns one")
    return fn


def check_cron(expression: str) -> str:
    """Raise ``ValueError`` unless ``expression`` is a 5-field cron expression or a croniter preset
    ('@hourly'), the forms both Airflow's ``CronDataIntervalTimetable`` and the plan task's
    interval arithmetic (``plan.request.run_interval``) read the same way. Returns it."""
    from croniter import croniter

    hint = "give 5 fields 'minute hour day-of-month month day-of-week', e.g. '0 * * * *' (hourly), or '@hourly'"
    try:
        croniter(expression)
    except (ValueError, KeyError, TypeError) as exc:  # CroniterError is a ValueError
        raise ValueError(f"{expression!r} is not a cron expression ({exc}); {hint}") from None
    fields = expression.split()
    if not expression.startswith("@") and len(fields) != 5:
        raise ValueError(f"{expression!r} has {len(fields)} fields (seconds or years are not supported); {hint}")
    try:
        croniter(expression).get_next()
    except ValueError:  # CroniterBadDateError: no date matches (February 31st)
        raise ValueError(f"{expression!r} never fires (no date matches it, e.g. February 30 or 31); {hint}") from None
    return expression


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_S = 100 * 365 * 86400.0  # a retention longer than a century is a typo, and a date before year 1


def parse_duration(value: object) -> float:
    """Seconds of a duration written ``10s``, ``2m``, ``1h``, ``7d`` (or a bare number of seconds): the
    forms a freshness rule and a retention take. Raises ``ValueError`` saying which forms are accepted."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; write e.g. '30s', '2m' or '1h'")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif str(value).strip().startswith("-"):
        seconds = -1.0
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a duration; write a number and a unit, s, m, h or d: e.g. '30s', "
                             f"'2m', '1h', '7d'")
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds < 0 or seconds != seconds:
        raise ValueError(f"{value!r}: a duration must be positive, e.g. '30s', '2m', '1h', '7d'")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"{value!r} is more than 100 years ({MAX_DURATION_S:.0f} s), the longest a duration may be; "
                         f"write it in days, e.g. '3650d'")
    return seconds


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$")
_UNIT_BYTES = {None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KiB": 2**10, "MiB": 2**20,
               "GiB": 2**30, "TiB": 2**40}


def parse_size(value: object) -> int:
    """Bytes of a size written as a number of bytes or with a unit (``128MiB``, ``1GB``): a YAML
    ``target_file_size: 128MB`` means what it says instead of failing on the unit."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size; write a number of bytes or a size with a unit: e.g. '128MiB'")
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a size; write a number of bytes, or a number and a unit (B, KB, MB, GB, "
                         f"KiB, MiB, GiB): e.g. '128MiB', '1GB'")
    return int(float(match.group(1)) * _UNIT_BYTES[match.group(2)])


SUPPORTED_DATABASES = ("sqlite", "postgresql")  # the ledger's locks and types are written for these


def check_ledger_url(url: str, databases: tuple[str, ...] | None = SUPPORTED_DATABASES) -> str:
    """Raise ``ValueError`` for a URL that does not parse (naming the part), a database other than
    ``databases`` (None: any SQLAlchemy has, for an Iceberg catalog), and a SQLite ledger that is not
    one file at one absolute path: a relative path resolves against each task's working directory
    (two tasks, two ledgers, batch 1 planned twice over the same offsets) and an in-memory database
    is gone when the task ends."""
    import sqlalchemy as sa

    try:
        u = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise ValueError(f"{url!r} is not a SQLAlchemy URL, e.g. 'sqlite:////var/lib/offsetbatch/ledger.db' or "
                         f"'postgresql+psycopg2://user@host/db'") from None
    except ValueError:  # SQLAlchemy's int() of the port: its message names neither the URL nor the part
        port = url.rpartition("@")[2].partition("/")[0].rpartition(":")[2]
        raise ValueError(f"the port of {url!r} is {port!r}, not a number; write host:port with a number (PostgreSQL's "
                         f"is 5432), or leave ':port' out") from None
    backend = u.get_backend_name()
    forms = "'postgresql+psycopg2://user@host:5432/db' or 'sqlite:////absolute/path/ledger.db'"
    if backend == "postgres":
        raise ValueError(f"{url!r}: PostgreSQL's URL scheme in SQLAlchemy is 'postgresql' (with its driver), "
                         f"not 'postgres': write {forms}")
    if databases is not None and backend not in databases:
        raise ValueError(f"{url!r}: a ledger is kept in SQLite or PostgreSQL, not {backend}: write {forms}")
    if u.get_backend_name() == "sqlite":
        database = u.database or ""
        if database in ("", ":memory:") or database.startswith("file:"):
            raise ValueError(f"{u.render_as_string(hide_password=True)!r} is an in-memory SQLite database, gone when "
                             f"the task ends; give a file: 'sqlite:////absolute/path/ledger.db'")
        if not database.startswith("/"):
            raise ValueError(f"{u.render_as_string(hide_password=True)!r} is a relative SQLite path, which each task "
                             f"resolves against its own working directory (two tasks would open two files: for a "
                             f"ledger, two ledgers planning the same offsets); give an absolute path: "
                             f"'sqlite:////absolute/path/{database}' (four slashes) or "
                             f"'sqlite:///${{OFFSETBATCH_HOME}}/{database}'")
    return url


class _LimitedLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML's safe loader with a bound on what aliases expand to: a "billion laughs" document of a
    few lines would otherwise expand to billions of nodes while the config is validated (and hold up
    the DAG processor past its import timeout, hiding every pipeline's DAG)."""

    MAX_NODES = 100_000  # a pipeline config has a few hundred

    def construct_document(self, node: "yaml.Node"):
        sizes: dict[int, int] = {}

        def size(n: "yaml.Node") -> int:
            key = id(n)
            if key not in sizes:
                sizes[key] = 0  # a recursive alias counts once
                children = (n.value if isinstance(n, yaml.SequenceNode)
                            else [c for pair in n.value for c in pair] if isinstance(n, yaml.MappingNode) else [])
                sizes[key] = 1 + sum(size(c) for c in children)
                if sizes[key] > self.MAX_NODES:
                    raise ValueError(f"the YAML expands to more than {self.MAX_NODES:,} values through its anchors and "
                                     f"aliases (&name / *name) and is refused; write the config out without them")
            return sizes[key]

        size(node)
        return super().construct_document(node)

    def construct_mapping(self, node: "yaml.MappingNode", deep: bool = False):
        """A key given twice is refused: PyYAML keeps the last one silently, so a setting written
        twice would lose the first without a word (the ``<<`` merge key keeps its meaning)."""
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # PyYAML refuses an unhashable key itself, with its own message
            if key in seen:
                raise ValueError(f"key {key!r} is given twice in one mapping (lines {seen[key] + 1} and "
                                 f"{key_node.start_mark.line + 1}); YAML would keep only the last: remove one")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def load_yaml(text: str):
    """``yaml.safe_load`` with ``_LimitedLoader``'s bound and its refusal of a key given twice
    (``ValueError`` for either)."""
    return yaml.load(text, Loader=_LimitedLoader)  # noqa: S506 - a SafeLoader subclass
