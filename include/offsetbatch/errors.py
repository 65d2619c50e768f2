"""Every error offsetbatch raises on purpose, under one base class.

Each message names the pipeline, the topic/partition and offsets (or the config field) involved,
and what to do next. Callers that only need "did offsetbatch refuse?" catch ``OffsetbatchError``;
the CLI maps the families below to its exit codes.

    OffsetbatchError
    ├── ConfigError              a pipeline config is invalid (file and field named)
    │   ├── TransformAnalysisError  the transform does not analyze against the records' columns
    │   ├── KafkaConnectionError    the Kafka connection's settings are wrong (a key named)
    │   ├── KafkaAuthError          the broker refused this client (credentials, TLS, ACLs)
    │   ├── SchemaRegistryConnectionError  the schema registry connection's settings are wrong
    │   └── SchemaRegistryAuthError the registry refused this client (credentials, TLS verification)
    ├── PipelineError            a run was refused before anything changed
    │   ├── RunRequestError      a trigger parameter is malformed or names unknown things
    │   ├── BackfillRefusedError a backfill/replay reaches offsets scheduled runs have not read
    │   ├── DataLossError        retention deleted offsets the pipeline still had to read
    │   ├── PartitionVanishedError / TopicNotFoundError
    │   ├── RebuildRefusedError  a table's manifests cannot become a consistent ledger
    │   ├── SchemaRegistryRefusedError  the registry answered a read with a 4xx (no retry helps)
    │   │   └── SchemaNotFoundError     no such schema id, GUID, subject or version there
    │   └── SchemaWireFormatError   a record's bytes are not in Confluent's wire format
    ├── CommitError              the commit refused a batch's output
    │   ├── ManifestError        the job's manifest does not reconcile with the plan
    │   └── BatchStateError      the batch is not in a state that can be committed
    ├── SinkError                a sink cannot stage or publish (names the table)
    │   ├── SinkSchemaError      the batch's columns cannot go into the table (no retry helps)
    │   └── SinkTargetError      the sink's target does not exist (an output topic; no retry helps)
    ├── OffsetOutOfPlanError     Spark returned a record outside the planned ranges (never committed)
    ├── KafkaUnreachableError    no broker answered (a retry may help)
    ├── SchemaRegistryUnavailableError  the schema registry did not answer, or failed (5xx): a retry may help
    ├── LedgerError              (offsetbatch.ledger) lock timeouts, stale commits, bad ledgers
    └── ArtifactError            a cached Java artifact (connector jars) is missing
"""


class OffsetbatchError(RuntimeError):
    """Base of every error offsetbatch raises on purpose."""


class ConfigError(OffsetbatchError, ValueError):
    """A pipeline config is invalid; the message names the file and the field."""


class PipelineError(OffsetbatchError):
    """Base for errors that stop a run before anything is changed."""


class DataLossError(PipelineError):
    """Offsets the pipeline still had to read were deleted by retention."""


class PartitionVanishedError(PipelineError):
    """A partition the ledger tracks no longer exists in Kafka."""


class TopicNotFoundError(PipelineError):
    """A configured topic does not exist."""


class RunRequestError(PipelineError):
    """A trigger parameter (mode, window, batch ids, reset target) is invalid."""


class ReplayRejectsMoreError(PipelineError):
    """A replay would replace published rows with rejections of the same records, and the operator
    did not ask for that (``allow_more_rejected``): refused at commit, before anything changes."""


class BackfillRefusedError(PipelineError):
    """A backfill or replay asked for offsets the scheduled runs have not read yet."""


class RebuildRefusedError(PipelineError):
    """The table's manifests cannot be turned into a consistent ledger, or the ledger is not empty."""


class TransformAnalysisError(ConfigError):
    """The transform does not analyze against the records it would get: found before any Kafka read."""


class OffsetOutOfPlanError(OffsetbatchError):
    """Spark returned a record outside the planned ranges: never commit such a batch."""


class CommitError(OffsetbatchError):
    """The commit refused a batch's output; nothing was committed."""


class ManifestError(CommitError):
    """A job's manifest does not reconcile with its batch's plan."""


class BatchStateError(CommitError):
    """The batch is not ``planned`` (abandoned, superseded), so it cannot be committed."""


class SinkError(OffsetbatchError):
    """A sink could not stage or publish a batch's output; the message names the table."""


class SinkSchemaError(SinkError):
    """The batch's columns cannot go into the table (a type change the table cannot make): the
    config or the transform must change, so the task fails without retries."""


class SinkTargetError(SinkError):
    """The sink's target is not there for this pipeline (an output topic that does not exist):
    someone must create it, so the task fails without retries, before the ledger transaction."""


class MarkersArchiveMissingError(SinkTargetError, FileNotFoundError):
    """The Iceberg markers archive a table property names is gone: which batches the expired
    snapshots published is unknown until it is restored, so no retry can help."""


class MaintenanceError(OffsetbatchError):
    """A maintenance pass failed on an error of the sink's or catalog's own (the pass's audit event
    says which actions were done; the next pass finishes each)."""


class ArtifactError(OffsetbatchError):
    """A Java artifact (Kafka broker, Spark connector) is not cached; the message says what to do."""


class KafkaConnectionError(ConfigError):
    """The Kafka connection's settings are wrong or incomplete (a key named): no retry fixes that."""


class JobSecretsError(ConfigError):
    """The Spark job's secrets file is missing or not private to its user (``job_secrets``)."""


class KafkaAuthError(ConfigError):
    """The broker refused this client (credentials, certificate, protocol or ACLs): no retry fixes that."""


class KafkaUnreachableError(OffsetbatchError):
    """No Kafka broker answered: a retry may succeed once it is back."""


class StorageConnectionError(ConfigError):
    """The object store's connection is missing, incomplete, or refused by the store (wrong key, no
    such bucket, no write permission): no retry fixes that."""


class StorageUnreachableError(OffsetbatchError):
    """The object store's endpoint did not answer: a retry may succeed once it is back."""


class SchemaRegistryConnectionError(ConfigError):
    """The schema registry connection's settings are wrong or incomplete (a key named): no retry fixes that."""


class SchemaRegistryAuthError(ConfigError):
    """The schema registry refused this client (HTTP 401/403), or its TLS certificate was not
    verified: the connection's credentials or CA must change, so no retry fixes that."""


class SchemaRegistryRefusedError(PipelineError):
    """The schema registry answered a read with a 4xx other than 401/403 (an invalid version): the
    same request gets the same answer, so no retry helps."""


class SchemaNotFoundError(SchemaRegistryRefusedError):
    """The schema registry has no such schema id, GUID, subject or version (HTTP 404): a record names
    a schema another registry assigned, or the config names a subject that is not there."""


class SchemaWireFormatError(PipelineError, ValueError):
    """A record's key or value is not in Confluent's wire format (wrong magic byte, too short, a bad
    schema id header): the bytes will not change, so no retry helps."""


class SchemaIncompatibleError(PipelineError):
    """A batch holds records whose writer schema the pipeline's reader schema cannot read (Avro's
    resolution rules): the batch fails before its commit, and only a change of the reader helps."""


class SchemaRegistryUnavailableError(OffsetbatchError):
    """The schema registry did not answer (refused, timed out) or failed (HTTP 5xx, 408, 429): a retry
    may succeed once it is back."""


class SparkConnectServerError(OffsetbatchError):
    """The Spark Connect server a job runs on did not answer, or went away while the job ran: the
    run fails naming it, and a retry may find it back (``dag.connect_server``)."""
