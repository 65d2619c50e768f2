"""The Spark job's body: read exactly the planned ranges, parse, transform, stage, observe (one pass)."""
