"""Rejected records as Parquet folders, one per output id: ``<root>/_rejected/batch_id=N``.

The files sink keeps its rejected records next to its table this way, and the kafka sink does too
when it has no dead-letter topic; both publish a batch's folder with one rename of the staged one.
"""

from __future__ import annotations

from dataclasses import dataclass

from offsetbatch import storage


@dataclass(frozen=True)
class RejectedFolders:
    root: str  # the sink's path

    @property
    def base(self) -> str:
        """What ``read_rejected`` reads: every output id's folder, ``batch_id`` as a partition column."""
        return f"{self.root}/_rejected"

    def of(self, output_id: int) -> str:
        return f"{self.base}/batch_id={output_id}"

    def publish(self, staged: str, output_id: int) -> None:
        """Replace ``output_id``'s folder with the staged one (a rename; a rerun after it finds no
        staged folder and leaves the published one)."""
        if storage.exists(staged):
            storage.remove(self.of(output_id))
            storage.move(staged, self.of(output_id))

    def retire(self, output_id: int) -> None:
        storage.remove(self.of(output_id))
