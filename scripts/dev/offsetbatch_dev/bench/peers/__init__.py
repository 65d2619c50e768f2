"""What a user would write instead of offsetbatch, as the Spark documentation shows it: standalone
Spark applications that import nothing of this project (``make bench`` submits them by path)."""
