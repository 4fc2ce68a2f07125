"""``poptorch.DataLoader``: PyTorch's loader handing out PopTorch's combined batches.

One element is ``batch_size x deviceIterations x replicationFactor x gradientAccumulation``
samples (what one call of the model consumes) and ``drop_last`` defaults to True. A process of a
distributed run (a poprun instance, ``Options.Distributed``) reads its own share of the dataset,
by PopTorch's rule (``auto_distributed_partitioning``, the default): the dataset in consecutive
blocks, one per process, of a whole number of combined batches (every process makes as many
calls); shuffled, the blocks are cut from one permutation of the whole dataset that every
process draws alike from ``Options.randomSeed``. Loading runs in the calling process whatever
``num_workers`` and ``mode`` say: the host's loading time on the IPU system is the emulator's to
model (``host-bound`` in the summary), not this machine's, and a script's dozen workers would only
compete with the training for this machine's cores.

The loading is measured as it runs (``measured()``): the samples the script's loader handed out and
the seconds ``next()`` took for them, in this process on one core, with the loader's ``num_workers``,
``persistent_workers`` and dataset size. A model compiled afterwards is emulated with that rate per
core instead of the assumed one, and its profile says so (docs/emulator.md, "Host input, measured").
``POPVISION_HOST_INPUT=assumed`` keeps the assumed rate, for profiles that do not vary from run to
run with this machine's load.

Under ``PVTI_OPTIONS`` each pass over the loader is an ``epoch`` instant on the system timeline, and
each batch two spans: ``data loading`` (PyTorch's loader fetching and collating it) and ``wait for
data`` (the training loop inside ``next()``: the loading and the loader's own overhead; loading is
synchronous here, so the two nearly coincide).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from popvision_py.format import system as timeline
from poptorch import _pvti
from poptorch._errors import Error, UnsupportedError
from poptorch._options import DataLoaderMode, Options


@dataclass
class LoaderMeasurement:
    """What the script's latest ``poptorch.DataLoader`` loaded so far, in this process on one core."""

    samples: int = 0
    seconds: float = 0.0
    workers: int = 0  # the script's num_workers (its workers on the IPU system's host)
    persistent: bool = False  # the script's persistent_workers
    dataset: int | None = None  # samples in one epoch of this process's dataset (None: not sized)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {"samples": self.samples, "seconds": self.seconds, "samples_per_s_per_core": self.samples_per_s,
                "num_workers": self.workers, "persistent_workers": self.persistent, "dataset_samples": self.dataset,
                "how": "the script's poptorch.DataLoader timed around next(), loading in the popvision process "
                       "on one core of this machine"}


_latest: LoaderMeasurement | None = None


HOST_INPUT_ENV = "POPVISION_HOST_INPUT"  # "measured" (the default) or "assumed"


def measured() -> LoaderMeasurement | None:
    """The latest DataLoader's measurement, once it has loaded a batch (None before, or when
    ``POPVISION_HOST_INPUT=assumed``)."""
    how = os.environ.get(HOST_INPUT_ENV, "measured").strip().lower()
    if how not in ("measured", "assumed"):
        raise Error(f"{HOST_INPUT_ENV}={how!r} is not a choice; set it to measured or assumed.")
    if how == "assumed":
        return None
    return _latest if _latest is not None and _latest.samples else None


class _Share(torch.utils.data.Dataset):
    """One process's block of a map-style dataset (PopTorch's partition)."""

    def __init__(self, dataset: torch.utils.data.Dataset, options: Options, combined: int, drop_last: bool) -> None:
        n = len(dataset)
        processes = options.Distributed.num_distributed_processes
        process = options.Distributed.distributed_process_id
        if drop_last:
            # a whole number of combined batches each, so that every process makes the same calls
            per_process = combined * (n // (combined * processes))
            if per_process == 0:
                raise Error(f"poptorch.DataLoader: the dataset's {n} samples do not give each of the {processes} "
                            f"processes one combined batch of {combined}.")
            self._base = process * per_process
            self._length = min(per_process, n - self._base)
            # what the blocks leave over; shuffled, every other pass starts this much later so that it is read too
            self._leftover = n % per_process
        else:
            sizes = [n // processes + (k < n % processes) for k in range(processes)]
            self._base, self._length, self._leftover = sum(sizes[:process]), sizes[process], 0
        self._dataset = dataset
        self._offset = self._base
        self._seed = options.random_seed
        self._generator: torch.Generator | None = None
        self._order: torch.Tensor | None = None

    def reshuffle(self) -> None:
        """A new permutation of the whole dataset, the same in every process (the generator starts
        from ``Options.randomSeed`` and goes on from pass to pass); the block moves by the leftover."""
        if self._generator is None:
            self._generator = torch.Generator().manual_seed(self._seed)
        self._order = torch.randperm(len(self._dataset), generator=self._generator)
        self._offset = self._base + self._leftover if self._offset == self._base else self._base

    def indices(self) -> list[int]:
        """The dataset indices this block reads now, in order."""
        return [self._global(k) for k in range(self._length)]

    def _global(self, index: int) -> int:
        k = self._offset + index
        return int(self._order[k]) if self._order is not None else k

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> Any:
        return self._dataset[self._global(index)]


class DataLoader(torch.utils.data.DataLoader):
    """``poptorch.DataLoader(options, dataset, batch_size=1, shuffle=False, ...)``."""

    def __init__(self, options: Options, dataset: torch.utils.data.Dataset, batch_size: int | None = 1,
                 shuffle: bool | None = None, num_workers: int = 0, drop_last: bool = True,
                 persistent_workers: bool | None = None, auto_distributed_partitioning: bool = True,
                 mode: DataLoaderMode = DataLoaderMode.Sync, async_options: dict | None = None,
                 rebatched_worker_size: int | None = None, **kwargs: Any) -> None:
        if not isinstance(options, Options):
            raise TypeError(f"poptorch.DataLoader takes poptorch.Options first, not {type(options).__name__}.")
        DataLoaderMode(mode)  # an unknown mode is refused as PopTorch does
        self._options = options
        per_call = (options.device_iterations * options.replication_factor
                    * options.Training.gradient_accumulation)
        self._combined_batch_size = None if batch_size is None else batch_size * per_call
        shuffle = bool(shuffle)
        self._reshuffle = False
        if options.Distributed.num_distributed_processes > 1 and auto_distributed_partitioning:
            dataset = self._share(dataset, shuffle, drop_last)
            self._reshuffle, shuffle = shuffle, False  # the share shuffles, the same way in every process
        for worker_only in ("prefetch_factor", "multiprocessing_context", "worker_init_fn"):
            kwargs.pop(worker_only, None)
        super().__init__(dataset, batch_size=self._combined_batch_size, shuffle=shuffle, num_workers=0,
                         drop_last=drop_last if batch_size is not None else False, **kwargs)
        sized = hasattr(dataset, "__len__") and not isinstance(dataset, torch.utils.data.IterableDataset)
        self._measured = LoaderMeasurement(workers=int(num_workers), persistent=bool(persistent_workers),
                                  dataset=len(dataset) if sized else None)

    def _share(self, dataset: torch.utils.data.Dataset, shuffle: bool, drop_last: bool) -> _Share:
        if isinstance(dataset, torch.utils.data.IterableDataset):
            raise UnsupportedError("poptorch.DataLoader's auto_distributed_partitioning of an IterableDataset",
                                   "partition it in the dataset and pass auto_distributed_partitioning=False")
        if self._combined_batch_size is None:
            raise Error("batch_size=None not allowed when using auto_distributed_partitioning.")
        if shuffle and self._options.random_seed is None:
            raise Error("When using auto_distributed_partitioning you must set poptorch.Options.randomSeed() to ensure "
                        "that tensors are in the same order in all processes.")
        return _Share(dataset, self._options, self._combined_batch_size, drop_last)

    def __iter__(self) -> Iterator[Any]:
        if self._reshuffle:
            self.dataset.reshuffle()
        global _latest
        _latest = self._measured
        batches = super().__iter__()
        recorder = _pvti.active()
        if recorder is None or not recorder.wanted(timeline.DATALOADER):
            recorder = None
        else:
            recorder.instant(timeline.DATALOADER, timeline.EPOCH)
        return _Timed(batches, recorder, self._measured, self._combined_batch_size)

    @property
    def combinedBatchSize(self) -> int | None:  # noqa: N802
        """Samples per element: the batch size times what one call of the model consumes."""
        return self._combined_batch_size

    @property
    def options(self) -> Options:
        return self._options

    def terminate(self) -> None:
        """PopTorch stops its asynchronous workers here; there are none."""


class _Timed:
    """PyTorch's iterator over the loader: each batch's loading measured, and under PVTI recorded
    with the wait for it as spans."""

    def __init__(self, batches: Any, recorder: Any, measured: LoaderMeasurement, combined: int | None) -> None:
        self._batches, self._recorder, self._measured, self._combined = batches, recorder, measured, combined

    def __iter__(self) -> _Timed:
        return self

    def __next__(self) -> Any:
        asked = time.time_ns()
        batch = next(self._batches)  # StopIteration ends the pass: nothing is recorded for it
        loaded = time.time_ns()
        self._measured.seconds += (loaded - asked) / 1e9
        self._measured.samples += self._combined or _samples(batch)
        if self._recorder is not None:
            self._recorder.span(timeline.DATALOADER, timeline.DATA_LOADING, asked, loaded)
            self._recorder.span(timeline.DATALOADER, timeline.WAIT_FOR_DATA, asked, time.time_ns())
        return batch

    def __len__(self) -> int:
        return len(self._batches)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batches, name)


def _samples(batch: Any) -> int:
    """Samples in a batch of unknown size: the first tensor's leading dimension."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    return next((_samples(x) for x in items if isinstance(x, (torch.Tensor, list, tuple, dict))), 1)
