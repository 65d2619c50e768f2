"""Airflow's face: the DAG factory, the three tasks' logic, the retry policy, the spark_job operators."""
