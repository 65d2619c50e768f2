"""The PySpark application ``spark-submit`` runs for a pipeline's batches (the spark_job task):

    spark-submit --jars <connector jars> <site-packages>/offsetbatch/job/spark_app/offsetbatch_job.py \
        --spec URI [--spec URI ...] --attempt ID

It ships inside the package (``offsetbatch.paths.SPARK_APP``), so an installed wheel runs it with no
checkout; ``jobs/offsetbatch_job.py`` in the repository links to it. It is alone in its folder because
Python puts a script's folder first on ``sys.path``.

The job's body is ``offsetbatch.job`` (read, transform, stage, observe, manifest); this file is only
its entry point, so the same code runs in a Spark Connect client without loading a file by path.
"""

import sys

from offsetbatch.job.run import main

if __name__ == "__main__":
    sys.exit(main())
