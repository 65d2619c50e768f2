"""The batch job with the Avro formats' UTF-8 checks of decoded strings turned off (the only
difference from ``jobs/offsetbatch_job.py``): the avro phase measures the job against it, which is
what those checks cost (issue 41, case 1: at most 5 %). Benchmark only; the expressions are built
in the driver, so patching the driver's module is enough."""

import sys

from offsetbatch.formats import avro_value

avro_value._not_utf8 = lambda column, shape: None  # noqa: SLF001 - the one thing this app changes

from offsetbatch.job.run import main  # noqa: E402 - after the patch, as the job would import it

if __name__ == "__main__":
    sys.exit(main())
