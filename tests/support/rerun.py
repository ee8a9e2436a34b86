"""Reading a recording back with rerun's own API (rerun.chunk.RrdReader): what each entity holds,
for the tests of tc-rerun-sink."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from tests.support.optional import import_or_skip

PROPERTIES = "/__properties"  # rerun's own entity: the recording's start time


@dataclass
class Entity:
    """One entity of a recording: its rows, and each column (components as `Archetype:field`,
    timelines by name; times as nanoseconds) as one Python value per row."""

    path: str
    rows: int = 0
    columns: dict[str, list] = field(default_factory=dict)

    @property
    def archetypes(self) -> set[str]:
        return {name.split(":", 1)[0] for name in self.columns if ":" in name}

    def values(self, column: str) -> list:
        assert column in self.columns, f"{self.path}: no column {column!r}; it has {sorted(self.columns)}"
        return self.columns[column]


def read_recording(path: Path | str) -> dict[str, Entity]:
    """Every entity of the .rrd at `path` (the rows of all its chunks, in the file's order; a
    column a chunk does not have is None on its rows), without rerun's own properties."""
    rerun_chunk = import_or_skip("rerun.chunk")  # rerun-sdk: an optional extra
    entities: dict[str, Entity] = {}
    for chunk in rerun_chunk.RrdReader(str(path)).stream():
        if chunk.entity_path == PROPERTIES:
            continue
        batch = chunk.to_record_batch()
        entity = entities.setdefault(chunk.entity_path, Entity(chunk.entity_path))
        names = [name for name in batch.schema.names if not name.startswith("rerun.")]  # not the row ids
        for name in names:
            column = batch.column(name)
            if pa.types.is_timestamp(column.type):  # as nanoseconds: datetime has microseconds only
                column = column.cast(pa.int64())
            entity.columns.setdefault(name, [None] * entity.rows).extend(column.to_pylist())
        for name, column in entity.columns.items():  # rows stay aligned across chunks of other columns
            if name not in names:
                column.extend([None] * chunk.num_rows)
        entity.rows += chunk.num_rows
    return entities
