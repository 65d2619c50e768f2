"""The driver's garbage collector the spark_job task adds: the pipeline's and the installation's
JVM options are kept, and a collector chosen by either is never replaced."""

from __future__ import annotations

import pytest

from offsetbatch.dag.driver_jvm import OPTION, THROUGHPUT_GC, spark_defaults, with_driver_gc


@pytest.mark.parametrize("conf, defaults, expected", [
    ({}, {}, THROUGHPUT_GC),
    ({OPTION: "-Dlog4j2.configurationFile=/etc/log4j2.xml"}, {}, f"-Dlog4j2.configurationFile=/etc/log4j2.xml {THROUGHPUT_GC}"),
    ({}, {OPTION: "-Djava.security.krb5.conf=/etc/krb5.conf"}, f"-Djava.security.krb5.conf=/etc/krb5.conf {THROUGHPUT_GC}"),
    ({OPTION: "-Da=1"}, {OPTION: "-Db=2"}, f"-Da=1 {THROUGHPUT_GC}"),  # spark-submit: --conf replaces the file's
    ({OPTION: "-XX:+UseG1GC -Xss4m"}, {}, "-XX:+UseG1GC -Xss4m"),
    ({}, {OPTION: "-XX:+UseZGC"}, None),  # the file's choice stands: nothing passed
])
def test_the_throughput_collector_is_added_to_the_driver_options_unless_one_is_chosen(conf, defaults, expected):
    out = with_driver_gc(conf, defaults)
    assert out.get(OPTION) == expected
    assert {k: v for k, v in out.items() if k != OPTION} == {k: v for k, v in conf.items() if k != OPTION}


def test_spark_defaults_are_read_as_spark_reads_them(tmp_path):
    conf_dir, home = tmp_path / "conf", tmp_path / "home"
    conf_dir.mkdir()
    (home / "conf").mkdir(parents=True)
    (conf_dir / "spark-defaults.conf").write_text(
        "# a comment\n! another\n\nspark.master   spark://m:7077\n"
        f"{OPTION}=-Dx=1 -Dy=2\nspark.eventLog.dir: /logs\n")
    (home / "conf" / "spark-defaults.conf").write_text(f"{OPTION} -XX:+UseZGC\n")
    assert spark_defaults({"SPARK_CONF_DIR": str(conf_dir), "SPARK_HOME": str(home)}) == {
        "spark.master": "spark://m:7077", OPTION: "-Dx=1 -Dy=2", "spark.eventLog.dir": "/logs"}
    assert spark_defaults({"SPARK_HOME": str(home)}) == {OPTION: "-XX:+UseZGC"}
    assert spark_defaults({"SPARK_HOME": str(tmp_path / "none")}) == {}
    assert spark_defaults({}) == {}
