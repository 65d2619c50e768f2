"""The job's allow-list of what a SQL transform reads, on the text of Spark's analyzed plan (issue 58,
item 1): the parsing rules, fail-closed, on plan texts as Spark 4.3 prints them. The same check on
real Spark sessions (classic and Spark Connect), through the job: tests/integration/spark/test_transform_reads.py."""

from __future__ import annotations

import pytest

from offsetbatch.job.reads import CHECK_COLUMN, UnreadablePlan, outside_reads, tree_of_explain, tree_of_tree_string

ROOT = f"Project [1 AS {CHECK_COLUMN}#90]"
RECORDS = """\
   :- SubqueryAlias records
   :  +- View (`records`, [kafka_topic#15, kafka_offset#17L, a#27])
   :     +- Project [kafka_topic#15, kafka_offset#17L, a#27]
   :        +- CollectMetrics offsetbatch-p-1, [count(1) AS rows#51L], 7
   :           +- RelationV2[key#7, value#8, topic#9, partition#10, offset#11L, timestamp#12, timestampType#13] KafkaTable"""
CLEAN = f"""{ROOT}
+- WithCTE
   :- CTERelationDef 0, false
   :  +- SubqueryAlias a
   :     +- Project [a#27, split(a#27, 
, -1) AS parts#30]
   :        +- LocalRelation [x#315]
   +- Join Inner
{RECORDS}
      +- Project [m#3, scalar-subquery#311 [] AS s#4]
         :  +- Aggregate [max(x#1) AS max(x)#322]
         :     +- SubqueryAlias `q.x`
         :        +- Range (0, 2, step=1)
         +- SubqueryAlias a
            +- CTERelationRef 0, true, [a#28], false, false
"""


def test_a_plan_over_the_records_and_its_own_values_reads_nothing_else():
    assert outside_reads(tree_of_tree_string(CLEAN)) == []


@pytest.mark.parametrize("leaf, found", [
    ("Relation [value#98] text", ["Relation [value#98] text"]),
    ("Relation spark_catalog.default.t[secret#1] parquet", ["Relation spark_catalog.default.t[secret#1] parquet"]),
    ("RelationV2[id#1] lake.db.orders", ["RelationV2[id#1] lake.db.orders"]),
    ("View (`global_temp`.`leak`, [secret#247])", ["View (`global_temp`.`leak`, [secret#247])"]),
    ("SubqueryAlias global_temp.leak", ["SubqueryAlias global_temp.leak"]),
    ("ScriptTransformation cat /etc/hostname, [x#300]", ["ScriptTransformation cat /etc/hostname, [x#300]"]),
    ("SomeFutureRelation [x#1]", ["SomeFutureRelation [x#1]"]),  # unknown: refused
], ids=["file", "catalog-table", "v2-table", "global-temp-view", "qualified-alias", "script", "unknown"])
def test_every_other_node_is_named(leaf, found):
    plan = f"{ROOT}\n+- Join Cross\n{RECORDS}\n   +- SubqueryAlias h\n      +- {leaf}\n"
    assert outside_reads(tree_of_tree_string(plan)) == found


def test_text_inside_a_node_can_add_lines_to_check_never_hide_one():
    """A string literal with line breaks: a line without a tree prefix is the rest of its node; one
    that looks like a node is checked like one. A fake records view exempts nothing."""
    plan = (f"{ROOT}\n+- Project [a#1, x\n   +- View (`records`, [a#1])\n      +- OneRowRelation AS y#2]\n"
            f"   +- Join Cross\n   {RECORDS.replace(chr(10), chr(10) + '   ')}\n      +- Relation [value#98] text\n")
    assert outside_reads(tree_of_tree_string(plan)) == ["Relation [value#98] text"]
    assert outside_reads(tree_of_tree_string(f"{ROOT}\n+- Project ['x\n:- Relation [a] text' AS y#1]\n"
                                             f"   +- OneRowRelation\n")) == ["Relation [a] text' AS y#1]"]


def _explain(analyzed: str, parsed: str = "Project [*]") -> str:
    return (f"== Parsed Logical Plan ==\n{parsed}\n\n== Analyzed Logical Plan ==\n{CHECK_COLUMN}: int\n{analyzed}\n"
            f"== Optimized Logical Plan ==\nProject\n\n== Physical Plan ==\n*(1) Project\n")


def test_the_analyzed_section_of_an_explain_string():
    assert tree_of_explain(_explain(CLEAN)) == tree_of_tree_string(CLEAN)


@pytest.mark.parametrize("text, reason", [
    (_explain(CLEAN, parsed="Project ['x\n== Optimized Logical Plan ==\n' AS y]"), "exactly one analyzed plan"),
    (_explain(CLEAN)[:200] + "... 5000 more characters", "exactly one analyzed plan"),
    (_explain(CLEAN) + "... 5000 more characters", "spark.sql.maxPlanStringLength"),
    (_explain(CLEAN.replace("View (`records`", "*********(redacted)")), "spark.sql.redaction.string.regex"),
    (_explain(CLEAN.replace(ROOT, "Project [a#1]")), "does not start with the check's own node"),
    (_explain(CLEAN).replace(f"{CHECK_COLUMN}: int", "a: int"), "not where Spark puts it"),
], ids=["repeated-title", "cut-early", "cut", "redacted", "no-root", "no-schema"])
def test_a_plan_text_that_cannot_be_read_with_certainty_is_refused(text, reason):
    with pytest.raises(UnreadablePlan, match=reason.replace(".", r"\.")):
        tree_of_explain(text)
