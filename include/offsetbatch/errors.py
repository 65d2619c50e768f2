"""Errors an operator sees. Each names the pipeline, the topic/partition and offsets involved, and
what to do next."""


class PipelineError(RuntimeError):
    """Base for errors that stop a run before anything is changed."""


class DataLossError(PipelineError):
    """Offsets the pipeline still had to read were deleted by retention."""


class PartitionVanishedError(PipelineError):
    """A partition the ledger tracks no longer exists in Kafka."""


class TopicNotFoundError(PipelineError):
    """A configured topic does not exist."""


class ManifestError(PipelineError):
    """A job's manifest does not reconcile with its batch's plan."""


class RequestError(PipelineError):
    """A trigger parameter (mode, window, batch ids, reset target) is invalid."""


class BackfillRefusedError(PipelineError):
    """A backfill or replay asked for offsets the scheduled runs have not read yet."""
