"""The persistent cache of autotuned expansions (:func:`sdfg_scan.autotune` writes it, selection reads it).

One JSON file, ``autotune.json``, in the user's cache directory (``$XDG_CACHE_HOME/sdfg_scan`` or
``~/.cache/sdfg_scan``); the environment variable ``SDFG_SCAN_CACHE`` names another directory. An
entry is keyed by the node's signature (class and semantic properties; a ``Scan``'s body by content
hash), its operands' shapes, strides and dtypes as the SDFG states them (symbolic where the SDFG is), the
target, the reproducibility class it was tuned at and the machine (processor model, core count); its value is the winning implementation,
the measured times and the sizes it was tuned at.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

SEMANTIC = ("op", "axis", "direction", "emit", "reverse", "exclusive", "columns", "prefactored", "offsets",
            "has_mask", "has_levels", "start", "stop", "block_size", "lanes", "combine")


def cache_dir() -> Path:
    env = os.environ.get("SDFG_SCAN_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sdfg_scan"


def cache_file() -> Path:
    return cache_dir() / "autotune.json"


def machine_id() -> str:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{platform.machine()}|{cpu or platform.processor()}|{os.cpu_count()}"


def _without_guids(obj):
    """``obj`` (JSON) without DaCe's ``guid`` fields: random per object, they would change the key every run."""
    if isinstance(obj, dict):
        return {k: _without_guids(v) for k, v in obj.items() if k != "guid"}
    if isinstance(obj, list):
        return [_without_guids(v) for v in obj]
    return obj


def node_key(node, state, target: str, reproducibility: str = "exact") -> str:
    """The cache key of ``node`` in ``state`` for ``target`` and the class floor ``reproducibility`` on this
    machine (a node tuned at two classes keeps a winner for each)."""
    props = {p: str(getattr(node, p)) for p in SEMANTIC if hasattr(node, p)}
    body = getattr(node, "body", None)
    if body is not None:
        text = json.dumps(_without_guids(body.to_json()), sort_keys=True, default=str) if hasattr(body, "to_json") \
            else str(body)
        props["body"] = hashlib.sha1(text.encode()).hexdigest()
    ops = []
    for e in sorted(list(state.in_edges(node)) + list(state.out_edges(node)),
                    key=lambda e: str(e.dst_conn if e.dst is node else e.src_conn)):
        if e.data.data is None:
            continue
        desc = state.sdfg.arrays[e.data.data]
        conn = e.dst_conn if e.dst is node else e.src_conn
        ops.append([str(conn), [str(s) for s in e.data.subset.size()], [str(s) for s in desc.strides],
                    desc.dtype.to_string()])
    raw = json.dumps([type(node).__name__, props, ops, target, reproducibility, machine_id()], sort_keys=True)
    return hashlib.sha1(raw.encode()).hexdigest()


def _valid(entry) -> bool:
    """Whether ``entry`` has the form :func:`store` writes (a file edited by hand or by another version may not)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("implementation"), str):
        return False
    times = entry.get("times", {})
    return isinstance(times, dict) and all(isinstance(t, (int, float)) and not isinstance(t, bool)
                                           for t in times.values())


def load() -> dict:
    """The cache's entries by key; a missing or unreadable file is an empty cache, and entries of another
    form (a corrupt file) are left out."""
    try:
        data = json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if _valid(v)} if isinstance(data, dict) else {}


def lookup(key: str) -> dict | None:
    return load().get(key)


def store(key: str, entry: dict) -> None:
    data = load()
    data[key] = entry
    path = cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)


__all__ = ["cache_dir", "cache_file", "load", "lookup", "machine_id", "node_key", "store"]
