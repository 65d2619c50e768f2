"""The operator's view: the offsetbatch CLI, status and lag, rich reports, doctor."""
