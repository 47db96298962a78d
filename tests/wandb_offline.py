"""Reading an offline W&B run back (test-only): wandb ships no Python reader for its
``.wandb`` transaction log, so the W&B tests parse it here.

A .wandb file is a LevelDB-style log: a 7-byte header (":W&B", magic 0xBEE1, version 0), then
32 KiB blocks of chunks (crc32c, length, type: 1 full, 2 first, 3 middle, 4 last), each record a
serialized wandb.proto Record.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_BLOCK = 32768
_CHUNK_HEADER = struct.Struct("<IHB")


def _records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B transaction log (no ':W&B' header)")
    pos, pending = 7, b""
    while pos + _CHUNK_HEADER.size <= len(data):
        room = _BLOCK - pos % _BLOCK
        if room < _CHUNK_HEADER.size:
            pos += room
            continue
        _, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        if kind == 0 and length == 0:  # zero padding at the end of a block
            pos += room
            continue
        if pos + _CHUNK_HEADER.size + length > len(data):  # still being written
            return
        chunk = data[pos + _CHUNK_HEADER.size: pos + _CHUNK_HEADER.size + length]
        pos += _CHUNK_HEADER.size + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk
            pending = b""


def read_offline_run(run_dir: str | Path, timeout: float = 30.0) -> dict[str, Any]:
    """Read an offline run folder (``wandb/offline-run-*``) back: ``name``, ``group``,
    ``job_type``, ``tags``, ``config`` (key → value), ``history`` (one dict per
    ``log`` call, with ``_step``), ``summary`` (the final values, as W&B would show) and
    ``complete`` (whether the run's exit record was found).

    wandb's service writes the file in the background and may still be flushing it after
    ``run.finish()`` returns, so the file is re-read until it holds the exit record.

    :param run_dir: the run folder, or its ``run-<id>.wandb`` file.
    :param timeout: seconds to wait for the exit record before returning what is there.
    """
    path = Path(run_dir)
    if path.is_dir():
        files = sorted(path.glob("run-*.wandb"))
        if not files:
            raise FileNotFoundError(f"no run-*.wandb file in {path}")
        path = files[0]
    deadline = time.monotonic() + timeout
    while True:
        out = _parse_run_file(path)
        if out["complete"] or time.monotonic() > deadline:
            return out
        time.sleep(0.1)


def _parse_run_file(path: Path) -> dict[str, Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    out: dict[str, Any] = {"config": {}, "history": [], "summary": {}, "complete": False}

    def key(item) -> str:
        return item.key or "/".join(item.nested_key)

    for raw in _records(path):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "exit":
            out["complete"] = True
        elif kind == "run":
            out.update(name=record.run.display_name, group=record.run.run_group,
                       job_type=record.run.job_type, tags=list(record.run.tags))
            for item in record.run.config.update:
                out["config"][key(item)] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                out["config"][key(item)] = json.loads(item.value_json)
        elif kind == "history":
            row = {key(item): json.loads(item.value_json) for item in record.history.item}
            out["history"].append(row)
            out["summary"].update({k: v for k, v in row.items() if not k.startswith("_")})
        elif kind == "summary":
            for item in record.summary.update:
                out["summary"][key(item)] = json.loads(item.value_json)
    for name, value in out["config"].items():  # W&B stores config values as {"value": v}
        if isinstance(value, dict) and set(value) == {"value"}:
            out["config"][name] = value["value"]
    return out
