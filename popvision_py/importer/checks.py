"""What the import checks of a trace before it trusts it: the JSON's nesting depth (on the bytes, before
ijson builds anything), the header's fields, and the type of each field the import reads. A field of the
wrong type, or a number out of range, is a ``TraceError`` naming it: never a default standing in for it.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from popvision_py.errors import PopvisionError

MAX_DEPTH = 64  # JSON nesting: a Kineto trace nests 8 deep (an event's Input Dims); yajl's builder is not bounded
MAX_WORLD = 1 << 20  # ranks: no real run has a million


class TraceError(PopvisionError):
    """A trace that is not a PyTorch profiler trace popvision can read (one sentence, exit 2)."""


class Fallback(Exception):
    """The fast path (``ranges``) does not take this trace as it stands: the streaming parser reads it."""


class Depth:
    """The nesting depth of a JSON text fed in pieces: brackets inside strings do not count. Columnar
    (NumPy over each piece's brackets and quotes), so it costs little beside the parse itself."""

    def __init__(self) -> None:
        self.level = 0
        self.in_string = False
        self.backslashes = 0  # the run of backslashes ending the previous piece

    def feed(self, data: bytes) -> int:
        """The deepest level reached in ``data``."""
        if not data:
            return self.level
        a = np.frombuffer(data, np.uint8)
        quote = a == 0x22
        backslash = a == 0x5C
        if self.backslashes or backslash.any():
            # a quote is escaped when an odd run of backslashes ends just before it
            at = np.arange(len(a))
            last_other = np.maximum.accumulate(np.where(backslash, -1 - self.backslashes, at))
            run = np.empty(len(a), np.int64)
            run[0] = self.backslashes
            run[1:] = at[:-1] - last_other[:-1]
            quote &= run % 2 == 0
            self.backslashes = int(len(a) - 1 - last_other[-1])
        else:
            self.backslashes = 0
        opening = (a == 0x5B) | (a == 0x7B)
        closing = (a == 0x5D) | (a == 0x7D)
        marks = np.flatnonzero(quote | opening | closing)
        if len(marks) == 0:
            return self.level
        is_quote = quote[marks]
        inside = (np.cumsum(is_quote) - is_quote + self.in_string) % 2 == 1  # within a string at the mark
        step = np.where(inside | is_quote, 0, np.where(opening[marks], 1, -1))
        levels = self.level + np.cumsum(step)
        self.level = int(levels[-1])
        self.in_string = bool((self.in_string + int(is_quote.sum())) % 2)
        return int(levels.max())


def not_json(word: str) -> Any:
    """``json.loads``' ``parse_constant``: NaN and Infinity are not JSON."""
    raise ValueError(f"{word} is not JSON")


def shown(value: Any) -> str:
    """A value of a trace as a sentence quotes it: short ones whole, others by their JSON type."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if value is None:
        return "null"
    text = json.dumps(value) if isinstance(value, (bool, str)) else repr(value)
    if len(text) <= 40:
        return text
    return f"a string of {len(value):,} characters" if isinstance(value, str) else f"a number of {len(text):,} digits"


def wrong(field: str, value: Any, wanted: str, name: Any = None) -> TraceError:
    """"has FIELD VALUE, not WANTED (event NAME)": a field of a trace holding what it may not."""
    where = f" (event {name[:80]!r})" if isinstance(name, str) else ""
    return TraceError(f"has {field} {shown(value)}, not {wanted}{where}")


def is_number(value: Any) -> bool:
    return type(value) is float or type(value) is int  # not bool (True is no duration)


def is_int(value: Any) -> bool:
    return type(value) is int


def header_fields(header: dict[str, Any]) -> tuple[int | None, int, int | None]:
    """``baseTimeNanoseconds`` (None where absent or 0), ``distributedInfo``'s rank (-1 where absent) and
    world size (None where absent), each checked: a wrong type or a number out of range is a sentence,
    never a default standing in for it."""
    base = header.get("baseTimeNanoseconds")
    if base is not None and not (is_int(base) and 0 <= base < 1 << 62):
        raise wrong("a baseTimeNanoseconds of", base, "a time in nanoseconds (an integer from 0 below 2^62)")
    info = header.get("distributedInfo", {})
    if not isinstance(info, dict):
        raise wrong("a distributedInfo of", info, "an object")
    rank, world = info.get("rank"), info.get("world_size")
    if world is not None and not (is_int(world) and 1 <= world <= MAX_WORLD):
        raise wrong("a distributedInfo.world_size of", world,
                     f"a number of ranks (an integer from 1 to {MAX_WORLD:,})")
    if rank is not None and not (is_int(rank) and 0 <= rank < (world or MAX_WORLD)):
        raise wrong("a distributedInfo.rank of", rank, f"a rank (an integer from 0 below the world size, "
                     f"{world or MAX_WORLD:,})")
    devices = header.get("deviceProperties", [])
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        raise wrong("a deviceProperties of", devices, "an array of objects")
    for device in devices:
        memory = device.get("totalGlobalMem")
        if memory is not None and not (is_int(memory) and 0 < memory < 1 << 62):
            raise wrong("a deviceProperties totalGlobalMem of", memory, "a size in bytes")
    return base or None, -1 if rank is None else rank, world


def is_dims(dims: Any) -> bool:
    """``Input Dims``: one entry per input, a shape (sizes) or a list of shapes (a tensor list)."""
    if not isinstance(dims, list):
        return False
    for entry in dims:
        if not isinstance(entry, list):
            return False
        shapes = entry if entry and isinstance(entry[0], list) else [entry]
        if not all(isinstance(shape, list) and all(is_int(d) and d >= 0 for d in shape) for shape in shapes):
            return False
    return True
