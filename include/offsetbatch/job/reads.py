"""What a SQL transform may read: the view ``records`` and nothing else (issue 58, item 1).

The config's text checks (``validation.check_system_access``) name the spellings they know; the job
decides on Spark's own analyzed plan, whatever the SQL's spelling (a source's short name, its Java
class name, ``IDENTIFIER('…')``, a catalog name, a source added later). Two guards, both in the job's
session and the same in classic PySpark and on Spark Connect:

* ``spark.sql.runSQLOnFiles`` is off while the transform is planned (``job.transform``, after the
  pipeline's own ``spark.conf``): ``fmt.`path``` resolves to nothing, in any spelling;
* ``check`` reads the analyzed plan of the transform's output and refuses every node that is not
  on an allow-list: operators that compute over their children, the ``records`` view, the Kafka
  relation the job reads, and leaves that hold only the query's own values (``VALUES``,
  ``range()``, one row, a CTE's reference). A catalog table, another session's ``global_temp``
  view, a file, JDBC or any other relation, ``TRANSFORM … USING`` (a program run on the hosts) and
  any node this list does not know are refused. (``DataFrame.inputFiles`` would be a second guard
  for files only, but it optimizes the plan once more: 50-150 ms a batch, 0.5 s for a job's first.)

The plan comes as text (Spark Connect has nothing else: its explain string): the tree of the
analyzed plan, one node per line after its ``+- ``/``:- `` prefix. A node's text may hold a line
break (a string literal, a column name), so a line without a prefix is the rest of the node above
and is skipped, and a line that only looks like a node is checked like one: such text can add
lines to check, never take a real node's line away. Every real node but the root has a prefixed
line, and the root is the check's own ``Project``, which is verified. A plan text that is cut
(``spark.sql.maxPlanStringLength``) or redacted (``spark.sql.redaction.string.regex``) is refused:
nobody can tell what it hides.
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame, SparkSession

from offsetbatch.spark_session import is_remote_session

# The one column of the check's own root node; the plan under it is the transform's, untouched.
CHECK_COLUMN = "_offsetbatch_reads_check"
_ROOT = re.compile(rf"Project \[1 AS {CHECK_COLUMN}#\d+\]")
_NODE = re.compile(r"(?:   |:  )*(?:\+- |:- )(.*)")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# Operators over their children that read nothing themselves (Spark 4.3's names in analyzed plans).
OPERATORS = frozenset({
    "Project", "Filter", "Join", "LateralJoin", "Aggregate", "Window", "Sort", "Union", "Intersect", "Except",
    "Distinct", "Deduplicate", "GlobalLimit", "LocalLimit", "Offset", "Tail", "Generate", "Expand", "Sample",
    "Repartition", "RepartitionByExpression", "RebalancePartitions", "ResolvedHint", "WithCTE", "CTERelationDef",
    "UnionLoop", "WithWindowDefinition", "CollectMetrics",
})
# Leaves holding only values of the query itself, or of a frame the job built in memory (LocalRelation
# is also VALUES; LogicalRDD a frame from Python data in classic PySpark). Another session's frame
# could only come through its view or a catalog, and their own nodes are refused.
VALUE_LEAVES = frozenset({"OneRowRelation", "LocalRelation", "LogicalRDD", "Range", "CTERelationRef", "UnionLoopRef"})
RECORDS_VIEW = "View (`records`, ["  # the job's own binding of the records (temp view or the request's relation)
# Spark's Kafka source as the job reads it (job.read: the DataSource V2 reader); the options are not in the text.
KAFKA_RELATION = re.compile(r"RelationV2\[key#\d+, value#\d+, topic#\d+, partition#\d+, offset#\d+L, timestamp#\d+, "
                            r"timestampType#\d+(?:, headers#\d+)?\] KafkaTable")
# An alias the query gave (r, records, a CTE's name): one name. A catalog's table or view and a
# global_temp view are aliased by their qualified name (spark_catalog.default.t, global_temp.v).
_OWN_ALIAS = re.compile(r"SubqueryAlias (?:\w+|`(?:[^`]|``)*`)")
_TRUNCATED = re.compile(r"(?:\.\.\. \d+ more characters|Truncated plan of \d+ characters)\s*\Z")
REDACTED = "*********(redacted)"  # Spark's replacement text (Utils.REDACTION_REPLACEMENT_TEXT)
_ANALYZED, _OPTIMIZED = "== Analyzed Logical Plan ==", "== Optimized Logical Plan =="


class UnreadablePlan(ValueError):
    """The analyzed plan's text cannot be read with certainty: the check refuses the transform."""


def outside_reads(tree: list[str]) -> list[str]:
    """The nodes of an analyzed plan's tree (its lines under the check's root) that read anything
    but the records, or that this check does not know: each node's first line, in plan order."""
    found = []
    for line in tree:
        node = _NODE.fullmatch(line)
        if node is None:
            continue  # the rest of the node above, whose text holds a line break
        text = node.group(1)
        name = (_NAME.match(text) or [""])[0]
        if (name in OPERATORS or name in VALUE_LEAVES
                or (name == "SubqueryAlias" and _OWN_ALIAS.fullmatch(text))
                or (name == "View" and text.startswith(RECORDS_VIEW))
                or (name == "RelationV2" and KAFKA_RELATION.fullmatch(text))):
            continue
        found.append(text)
    return found


def analyzed_tree(spark: SparkSession, out: DataFrame) -> list[str]:
    """The lines of ``out``'s analyzed plan under a root of the check's own: in classic PySpark the
    plan's tree string; on Spark Connect the analyzed section of its explain string (the only plan
    text the protocol gives). Raises ``UnreadablePlan`` when the text is ambiguous, cut or redacted."""
    from pyspark.sql import functions as F

    # LIMIT 0 under the root: the optimizer turns the plan into an empty relation, so the explain
    # string (which carries the optimized and physical plans too) plans no Kafka read: 20-30 ms
    # instead of 30-80 ms a batch on Spark Connect. The analyzed plan keeps the whole tree.
    probe = out.limit(0).select(F.lit(1).alias(CHECK_COLUMN))
    if is_remote_session(spark):
        return tree_of_explain(probe._explain_string(extended=True))  # noqa: SLF001 - what DataFrame.explain prints
    return tree_of_tree_string(probe._jdf.queryExecution().analyzed().treeString())  # noqa: SLF001 - Py4J


def tree_of_explain(text: str) -> list[str]:
    """The check's plan under its root, from an extended explain string (Spark Connect)."""
    lines = text.split("\n")
    if lines.count(_ANALYZED) != 1 or lines.count(_OPTIMIZED) != 1:
        raise UnreadablePlan("its explain text does not hold exactly one analyzed plan (a string literal or name in "
                             "the SQL that repeats Spark's section titles, or a cut plan text)")
    start, end = lines.index(_ANALYZED), lines.index(_OPTIMIZED)
    if start > end or lines[start + 1:start + 2] != [f"{CHECK_COLUMN}: int"]:
        raise UnreadablePlan("its explain text's analyzed plan is not where Spark puts it")
    return _below_root(text, lines[start + 2:end])


def tree_of_tree_string(text: str) -> list[str]:
    """The check's plan under its root, from the analyzed plan's tree string (classic PySpark)."""
    return _below_root(text, text.split("\n"))


def _below_root(text: str, section: list[str]) -> list[str]:
    if _TRUNCATED.search(text):
        raise UnreadablePlan("Spark cut its plan text (spark.sql.maxPlanStringLength is smaller than the plan): "
                             "leave spark.sql.maxPlanStringLength at its default")
    if any(REDACTED in line for line in section):
        raise UnreadablePlan("Spark redacted part of its plan text (spark.sql.redaction.string.regex matches it): "
                             "remove that setting or make it match less")
    section = list(section)
    while section and not section[-1]:
        section.pop()
    if not section or not _ROOT.fullmatch(section[0]):
        raise UnreadablePlan(f"its analyzed plan does not start with the check's own node: {section[:1]!r}")
    return section[1:]


def check(spark: SparkSession, out: DataFrame) -> str | None:
    """``None`` when ``out`` (the transform's output) reads only the records; else what it reads
    besides, in a few words for the error: the plan's first such nodes. Getting the plan analyzes
    it: a plan that does not analyze raises Spark's error here."""
    try:
        found = outside_reads(analyzed_tree(spark, out))
    except UnreadablePlan as exc:
        return f"a plan this check cannot read with certainty: {exc}"
    if not found:
        return None
    shown = [f"{_clip(node)!r}" for node in dict.fromkeys(found)]
    return ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
