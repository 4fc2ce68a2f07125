"""The ``kernels`` table of an imported profile (schema 5) as arrays, one row per kernel, copy or set: ``Kernels``,
and its pieces a figure of a long rank works on one at a time (``Kernels.pieces``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from popvision_py.analysis.common.tables import Columns
from popvision_py.analysis.imported import intervals
from popvision_py.analysis.imported.intervals import idle_cuts
from popvision_py.format.schema import KERNEL_KINDS

# the runtime calls whose kernels HTA's launch statistics count (cuda_kernel_launch_stats)
HTA_LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")


@dataclass(frozen=True)
class Kernels:
    """The ``kernels`` table as int64 arrays, one row per kernel, copy or set, sorted by ``ipu`` then
    ``start``. ``kind`` is a code into ``schema.KERNEL_KINDS``, ``name`` a code into ``names``;
    ``ranks[ipu]`` is the rank the trace names (an imported profile's IPU is its position)."""

    ipu: np.ndarray
    stream: np.ndarray
    kind: np.ndarray
    name: np.ndarray
    start: np.ndarray
    end: np.ndarray
    correlation: np.ndarray
    launch_start: np.ndarray
    launch_end: np.ndarray
    hta_launch: np.ndarray  # bool: launched by one of HTA_LAUNCH_CALLS
    names: np.ndarray
    ranks: np.ndarray
    # what each moves (bytes), and its process group, launching operator and module: codes into ``labels``
    # (its words: "" where the trace says none)
    nbytes: np.ndarray | None = None
    group: np.ndarray | None = None
    op: np.ndarray | None = None
    module: np.ndarray | None = None
    labels: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.start)

    @classmethod
    def from_columns(cls, columns: Columns, ranks: Any) -> Kernels:
        """The table as ``Report.columns("kernels")`` decodes it; ``ranks``: each IPU's rank."""
        n = len(columns)
        col = (lambda c: np.asarray(columns[c], np.int64)) if n else (lambda c: np.zeros(0, np.int64))  # noqa: E731
        name, names = _sorted(columns.codes("name"), columns.words("name")) if n else (np.zeros(0, np.int64),
                                                                                      np.zeros(0, object))
        return cls(ipu=col("ipu"), stream=col("stream"),
                   kind=columns.codes_in("kind", KERNEL_KINDS) if n else np.zeros(0, np.int64), name=name,
                   start=col("start_cycle"), end=col("end_cycle"), correlation=col("correlation"),
                   launch_start=col("launch_start_cycle"), launch_end=col("launch_end_cycle"),
                   hta_launch=(columns.codes_in("launch_name", HTA_LAUNCH_CALLS) < len(HTA_LAUNCH_CALLS)) if n
                   else np.zeros(0, bool),
                   names=names, ranks=np.asarray(ranks, np.int64),
                   nbytes=col("bytes") if "bytes" in columns else np.zeros(n, np.int64), **_labelled(columns, n))

    @classmethod
    def build(cls, ipu: Any, stream: Any, kind: Any, name: Any, start: Any, end: Any, launch_start: Any = None,
              launch_end: Any = None, correlation: Any = None, ranks: Any = None, launch_name: Any = None,
              nbytes: Any = None, labels: dict[str, Any] | None = None) -> Kernels:
        """Kernels from plain sequences (``kind`` and ``name`` as strings), sorted by ipu then start:
        the tests' and the benchmark's raw traces' way in. Launch times default to -1 (none), the launching
        call's name to ``cudaLaunchKernel`` where a launch is given; ``nbytes`` to 0 and ``labels`` (``group``,
        ``op``, ``module``: strings per kernel) to none."""
        ipu = np.asarray(ipu, np.int64)
        n = len(ipu)
        none = np.full(n, -1, np.int64)
        names, codes = np.unique(np.asarray(name, dtype=object).astype(str), return_inverse=True)
        kinds = np.array([KERNEL_KINDS.index(k) for k in np.asarray(kind, dtype=object).tolist()], np.int64)
        start = np.asarray(start, np.int64)
        order = np.lexsort((start, ipu))
        pick = lambda a: (none if a is None else np.asarray(a, np.int64))[order]  # noqa: E731
        count = int(ipu.max()) + 1 if n else 0
        return cls(ipu=ipu[order], stream=np.asarray(stream, np.int64)[order], kind=kinds[order],
                   name=codes.astype(np.int64)[order], start=start[order], end=np.asarray(end, np.int64)[order],
                   correlation=pick(correlation), launch_start=pick(launch_start), launch_end=pick(launch_end),
                   hta_launch=(pick(launch_start) >= 0) if launch_name is None else np.isin(
                       np.asarray(launch_name, dtype=object).astype(str), HTA_LAUNCH_CALLS)[order],
                   names=names.astype(object),
                   ranks=np.arange(count, dtype=np.int64) if ranks is None else np.asarray(ranks, np.int64),
                   nbytes=pick(nbytes).clip(0) if nbytes is not None else np.zeros(n, np.int64),
                   **{k: v[order] if k in LABELS else v for k, v in _labels_of(n, labels or {}).items()})

    @classmethod
    def joined(cls, pieces: list[Kernels], let_go: Callable[[], Any] | None = None) -> Kernels:
        """The pieces' kernels (a rank's pieces read, of one ``ranks``) one after the other, as ``from_columns`` makes
        their rows, names and labels the sorted union of the pieces' words. A field at a time, each let go of in the
        pieces once joined (``pieces`` is changed), then ``let_go()`` where given (a long rank's pages handed back)."""
        if len(pieces) == 1:
            return pieces[0]
        out: dict[str, Any] = {"ranks": pieces[0].ranks, "labels": {}}
        for coded in ("name", *LABELS):  # each piece's codes into the union of the pieces' words
            words_of = [p.names if coded == "name" else p.labels[coded] for p in pieces]
            words = np.unique(np.concatenate(words_of).astype(object))
            out[coded] = np.concatenate([np.searchsorted(words, w).astype(np.int64)[getattr(p, coded)]
                                         for w, p in zip(words_of, pieces)])
            (out if coded == "name" else out["labels"])["names" if coded == "name" else coded] = words
            pieces[:] = [replace(p, **{coded: None}) for p in pieces]
        for name in ROW_FIELDS:
            if name not in out:
                out[name] = np.concatenate([getattr(p, name) for p in pieces])
                pieces[:] = [replace(p, **{name: None}) for p in pieces]
                if let_go is not None:
                    let_go()
        return cls(**out)

    def owned(self) -> Kernels:
        """These kernels with arrays of their own: a copy of each that is a view (of the Arrow table read)."""
        return replace(self, **{f: getattr(self, f).copy() for f in ROW_FIELDS
                                if getattr(self, f) is not None and not getattr(self, f).flags.owndata})

    def take(self, rows: np.ndarray) -> Kernels:
        """The kernels at ``rows`` (a mask or indexes), in their order: views where they are a run (not copies)."""
        at = np.flatnonzero(rows) if rows.dtype == bool else np.asarray(rows)
        if len(at) and at[-1] - at[0] + 1 == len(at) and (rows.dtype == bool or (np.diff(at) == 1).all()):
            rows = slice(int(at[0]), int(at[-1]) + 1)
        return replace(self, **{f: v if (v := getattr(self, f)) is None or isinstance(v, Undecoded) else v[rows]
                                for f in ROW_FIELDS})

    def words(self, label: str, codes: np.ndarray) -> np.ndarray:
        """A label's (``group``, ``op``, ``module``) words at ``codes``."""
        return self.labels[label][codes]

    def clip(self, window: tuple[np.ndarray, np.ndarray]) -> Kernels:
        """Each kernel cut to its rank's window ``(start[ipu], end[ipu])``; those left with no time dropped."""
        lo, hi = (np.asarray(w, np.int64)[self.ipu] for w in window)
        start, end = np.clip(self.start, lo, hi), np.clip(self.end, lo, hi)
        inside = end > start
        return replace(self, start=start, end=end).take(inside)

    def pieces(self, rows: int | None = None, fields: tuple[str, ...] | None = None) -> Iterator[Kernels]:
        """These kernels in runs of about ``rows`` or more (views; one where fewer), cut where their rank's GPU
        idles (``intervals.idle_cuts``): a figure additive over a rank's time is the sum of the pieces'. ``fields``:
        those a figure reads beside ``ipu``, ``start`` and ``end`` (``HeldKernels`` decodes only those; all here)."""
        cuts = idle_cuts(self.ipu, self.start, self.end, rows).tolist()
        for a, b in zip(cuts[:-1], cuts[1:]):
            yield self if b - a == len(self) else self.take(np.arange(a, b))

    def facts(self) -> Facts:
        """Each IPU's kernels, first start and last end, and the streams (``Facts``)."""
        count = np.bincount(self.ipu, minlength=self.num_ranks)[:self.num_ranks]
        lo = np.full(self.num_ranks, np.iinfo(np.int64).max, np.int64)
        hi = np.zeros(self.num_ranks, np.int64)
        np.minimum.at(lo, self.ipu, self.start)
        np.maximum.at(hi, self.ipu, self.end)
        return Facts(count, lo, hi, np.unique(self.stream))

    def where(self, test: Callable[[Kernels], np.ndarray], fields: tuple[str, ...] = ()) -> Kernels:
        """The kernels for which ``test`` (of kernels, a mask; reading ``fields`` beside their times) holds:
        ``HeldKernels.where``'s twin."""
        return self.take(test(self))

    def moved(self, first: int, ranks: np.ndarray) -> Kernels:
        """These kernels with their ``ipu`` counted from ``first`` and those IPUs' ``ranks``."""
        return replace(self, ipu=self.ipu - first, ranks=ranks)

    @property
    def num_ranks(self) -> int:
        return len(self.ranks)


LABELS = ("group", "op", "module")  # the kernels' words beside their names (the table's category columns)
# ``Kernels``' fields of a value a kernel
ROW_FIELDS = ("ipu", "stream", "kind", "name", "start", "end", "correlation", "launch_start", "launch_end",
              "hta_launch", "nbytes", *LABELS)


def _labelled(columns: Columns, n: int) -> dict[str, Any]:
    """``Kernels``' label codes and their words, from the table's columns (none before they were written)."""
    out: dict[str, Any] = {"labels": {}}
    for label in LABELS:
        if n and label in columns:
            out[label], out["labels"][label] = _sorted(columns.codes(label), columns.words(label))
        else:
            out[label], out["labels"][label] = np.zeros(n, np.int64), np.array([""], object)
    return out


def _sorted(codes: np.ndarray, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A category's codes and words, the words sorted as ``build``'s: ties go by name, whole or a rank read."""
    order = np.argsort(words.astype(str), kind="stable")
    code = np.empty(len(order), np.int64)
    code[order] = np.arange(len(order))
    return code[codes], words[order]


def _labels_of(n: int, given: dict[str, Any]) -> dict[str, Any]:
    """``Kernels``' label codes and words from plain strings per kernel (``build``)."""
    out: dict[str, Any] = {"labels": {}}
    for label in LABELS:
        words = np.asarray(given.get(label, [""] * n), dtype=object).astype(str)
        vocabulary, codes = np.unique(words, return_inverse=True)
        out[label], out["labels"][label] = codes.astype(np.int64), vocabulary.astype(object)
    return out


class Undecoded:
    """A field a piece of a held rank was not decoded with (``HeldKernels.pieces``' ``fields``): any use of it
    raises, rather than comparing as None would."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise AttributeError(f"the kernels' {self.name!r} was not decoded: name it in pieces(fields=...)")

    __getitem__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __add__ = __radd__ = __sub__ = __rsub__ = _fail
    __mul__ = __and__ = __rand__ = __or__ = __ror__ = __invert__ = __neg__ = __array__ = __len__ = __iter__ = _fail
    __hash__ = object.__hash__


@dataclass(frozen=True)
class Facts:
    """What several figures take of all of a rank's kernels: each IPU's ``count`` of kernels, its first kernel's start
    (``lo``; int64's largest without any) and last kernel's end (``hi``; 0), and the ``streams``, sorted."""

    count: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    streams: np.ndarray


HOLD_KERNELS = 1 << 20  # a rank of this many kernels or more is held compressed (``HeldKernels``)
_CODEC = "lz4"


@dataclass(frozen=True)
class Stored:
    """Some kernels of one IPU (a piece of a long rank, as read) held compressed: each field's differences from the
    row before (``np.diff``, undone by ``np.cumsum``, exact in int64's wrap-around) in LZ4, with its own words."""

    rows: int
    ipu: np.ndarray  # the IPU, one a row (a broadcast: no memory), for the reader's ordering
    fields: dict[str, Any]  # field -> its compressed differences
    names: np.ndarray
    labels: dict[str, np.ndarray]
    starts: tuple[int, int, bool]  # its first and last start, and whether its starts rise

    def __len__(self) -> int:
        return self.rows

    @classmethod
    def of(cls, k: Kernels) -> Stored:
        """``k`` (one IPU's rows) compressed."""
        fields = {f: pa.compress(np.diff(np.asarray(getattr(k, f), np.int64), prepend=np.int64(0)), codec=_CODEC,
                                 asbytes=True)  # bytes of its size: the buffer is its bound, resident
                  for f in ROW_FIELDS if f != "ipu"}
        ipu = int(k.ipu[0]) if len(k) else 0
        starts = (int(k.start[0]), int(k.start[-1]), bool((np.diff(k.start) >= 0).all())) if len(k) else (0, 0, True)
        return cls(len(k), np.broadcast_to(np.int64(ipu), (len(k),)), fields, k.names, dict(k.labels), starts)

    def kernels(self, ranks: np.ndarray, names: np.ndarray | None = None, labels: dict[str, np.ndarray] | None = None,
                fields: set[str] | None = None) -> Kernels:
        """These kernels as arrays, their names and labels codes into ``names`` and ``labels`` (sorted supersets of
        their own words) where given, else into their own; of ``fields`` and their times only where given (the
        others ``Undecoded``)."""
        def field(f: str) -> np.ndarray:
            values = np.cumsum(np.frombuffer(pa.decompress(self.fields[f], decompressed_size=self.rows * 8,
                                                           codec=_CODEC), np.int64))
            if f == "name" and names is not None:
                return np.searchsorted(names, self.names)[values] if self.rows else values
            if f in LABELS and labels is not None:
                return np.searchsorted(labels[f], self.labels[f])[values] if self.rows else values
            return values.astype(bool) if f == "hta_launch" else values
        wanted = set(ROW_FIELDS) if fields is None else {*fields, "start", "end"}
        return Kernels(ipu=np.array(self.ipu), names=self.names if names is None else names, ranks=ranks,
                       labels=dict(self.labels if labels is None else labels),
                       **{f: field(f) if f in wanted else Undecoded(f) for f in ROW_FIELDS if f != "ipu"})


@dataclass(frozen=True)
class HeldKernels:
    """A long rank's kernels (one IPU's) held compressed, a piece as read at a time (``Stored``), and given back a piece
    at a time (``pieces``), as ``Kernels.pieces`` gives them: cut where the rank's GPU idles. What a figure holds is
    then a piece's arrays and the rank compressed, not the rank's arrays (1.57 M kernels: 156 MiB as arrays).

    A figure of a rank takes its ``pieces()``, ``facts()``, ``names``, ``labels``, ``ranks`` and ``num_ranks`` only:
    every figure of ``gpu_ranks.FIGURES`` does. ``where`` keeps some kernels of each piece (HTA's selection)."""

    stored: tuple[Stored, ...]
    names: np.ndarray
    labels: dict[str, np.ndarray]
    ranks: np.ndarray
    first: int  # the IPU's ``ipu`` is counted from this
    rows: int
    test: Callable[[Kernels], np.ndarray] | None = None
    test_fields: tuple[str, ...] = ()  # those ``test`` reads
    _facts: list[Facts] = field(default_factory=list, compare=False)  # worked out once, on first asking

    @classmethod
    def of(cls, pieces: list[Kernels | Stored], first: int, ranks: np.ndarray) -> HeldKernels | None:
        """One IPU's pieces as read (``Kernels`` or ``Stored``), in order, held compressed; None where its kernels are
        not in start order (the pieces are cut by their starts)."""
        stored = tuple(p if isinstance(p, Stored) else Stored.of(p) for p in pieces)
        full = [s.starts for s in stored if len(s)]
        if not all(rising for _, _, rising in full) or any(b[0] < a[1] for a, b in zip(full[:-1], full[1:])):
            return None
        names = np.unique(np.concatenate([s.names for s in stored]).astype(object))
        labels = {label: np.unique(np.concatenate([s.labels[label] for s in stored]).astype(object))
                  for label in LABELS}
        return cls(stored, names, labels, ranks, first, sum(len(s) for s in stored))

    def __len__(self) -> int:
        return self.rows if self.test is None else sum(len(p) for p in self.pieces(fields=()))

    @property
    def num_ranks(self) -> int:
        return len(self.ranks)

    def facts(self) -> Facts:
        """``Kernels.facts``, of one pass over the pieces, kept."""
        if not self._facts:
            each = [p.facts() for p in self.pieces(fields=("stream",))]
            self._facts.append(Facts(sum(f.count for f in each), np.minimum.reduce([f.lo for f in each]),
                                     np.maximum.reduce([f.hi for f in each]),
                                     np.unique(np.concatenate([f.streams for f in each]))))
        return self._facts[0]

    def where(self, test: Callable[[Kernels], np.ndarray], fields: tuple[str, ...] = ()) -> HeldKernels:
        return replace(self, test=test, test_fields=fields, _facts=[])

    def moved(self, first: int, ranks: np.ndarray) -> HeldKernels:
        return replace(self, first=first, ranks=ranks, _facts=[])

    def pieces(self, rows: int | None = None, fields: tuple[str, ...] | None = None) -> Iterator[Kernels]:
        """The rank's kernels in runs of about ``rows`` or more (``intervals.PIECE_KERNELS`` by default), a few row
        groups decoded at a time, cut before a kernel that starts after every kernel before it has ended (its
        starts rise, so the kernels before a cut ended before any after it starts). Of each, the kernels ``where``
        keeps; a piece left empty is left out (one empty piece where every one is, as ``Kernels.pieces`` gives).
        ``fields`` (beside ``ipu``, ``start`` and ``end``): the only ones decoded where given (the others
        ``Undecoded``)."""
        given = False
        wanted = None if fields is None else {*fields, *self.test_fields}
        for piece in self._cut(intervals.PIECE_KERNELS if rows is None else rows, wanted):
            piece = piece if self.test is None else piece.take(self.test(piece))
            if len(piece):
                given = True
                yield piece
        if not given:
            yield replace(Kernels.build([], [], [], [], [], [], ranks=self.ranks), names=self.names,
                          labels=dict(self.labels))

    def _cut(self, rows: int, fields: set[str] | None) -> Iterator[Kernels]:
        """The pieces, each stored piece decoded in turn: a cut may fall before a kernel that starts after every kernel
        before it has ended (the latest end so far carried from group to group), ``rows`` or more after the last.
        Only a piece that runs across stored pieces is a copy; the others are views of theirs."""
        carry: Kernels | None = None  # the rows after the last cut, a view of their group (or a copy across groups)
        reach = np.iinfo(np.int64).min  # the latest end of every row so far
        for stored in self.stored:
            group = stored.kernels(self.ranks, self.names, self.labels, fields).moved(self.first, self.ranks)
            if not len(group):
                continue
            ends = np.maximum(np.maximum.accumulate(group.end), reach)
            free = np.flatnonzero(np.r_[reach, ends[:-1]] < group.start)  # a cut may fall before these rows
            reach = int(ends[-1])
            cuts = intervals.chosen(free, rows, -(len(carry) if carry is not None else 0))
            if not cuts:
                carry = group if carry is None else _concatenated([carry, group])
                continue
            head = group.take(np.arange(cuts[0]))
            if carry is not None or len(head):
                yield head if carry is None else _concatenated([carry, head])
            for a, b in zip(cuts[:-1], cuts[1:]):
                yield group.take(np.arange(a, b))
            carry = group.take(np.arange(cuts[-1], len(group)))
        if carry is not None:
            yield carry


def _concatenated(pieces: list[Kernels]) -> Kernels:
    """Kernels of one vocabulary one after the other."""
    if len(pieces) == 1:
        return pieces[0]
    return replace(pieces[0], **{f: v if (v := getattr(pieces[0], f)) is None or isinstance(v, Undecoded) else
                                 np.concatenate([getattr(p, f) for p in pieces]) for f in ROW_FIELDS})
