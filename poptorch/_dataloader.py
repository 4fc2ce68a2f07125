"""``poptorch.DataLoader``: PyTorch's loader handing out PopTorch's combined batches.

One element is ``batch_size x deviceIterations x replicationFactor x gradientAccumulation``
samples (what one call of the model consumes), ``drop_last`` defaults to True, and a process of a
distributed run reads its own contiguous share of the dataset, as in PopTorch. Loading runs in the
calling process whatever ``num_workers`` and ``mode`` say: the host's loading time on the IPU
system is the emulator's to model (``host-bound`` in the summary), not this machine's, and a
script's dozen workers would only compete with the training for this machine's cores.

Under ``PVTI_OPTIONS`` each pass over the loader is an ``epoch`` instant on the system timeline, and
each batch two spans: ``data loading`` (PyTorch's loader fetching and collating it) and ``wait for
data`` (the training loop inside ``next()``: the loading and the loader's own overhead; loading is
synchronous here, so the two nearly coincide).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import torch

from popvision_py.format import system as timeline
from poptorch import _pvti
from poptorch._options import DataLoaderMode, Options


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
        processes = options.Distributed.num_distributed_processes
        if processes > 1 and auto_distributed_partitioning:
            share = len(dataset) // processes
            first = options.Distributed.distributed_process_id * share
            dataset = torch.utils.data.Subset(dataset, range(first, first + share))
        per_call = (options.device_iterations * options.replication_factor
                    * options.Training.gradient_accumulation)
        self._combined_batch_size = None if batch_size is None else batch_size * per_call
        for worker_only in ("prefetch_factor", "multiprocessing_context", "worker_init_fn"):
            kwargs.pop(worker_only, None)
        super().__init__(dataset, batch_size=self._combined_batch_size, shuffle=bool(shuffle), num_workers=0,
                         drop_last=drop_last if batch_size is not None else False, **kwargs)

    def __iter__(self) -> Iterator[Any]:
        batches = super().__iter__()
        recorder = _pvti.active()
        if recorder is None or not recorder.wanted(timeline.DATALOADER):
            return batches
        recorder.instant(timeline.DATALOADER, timeline.EPOCH)
        return _Timed(batches, recorder)

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
    """PyTorch's iterator over the loader, each batch's loading and the wait for it recorded as spans."""

    def __init__(self, batches: Any, recorder: Any) -> None:
        self._batches, self._recorder = batches, recorder

    def __iter__(self) -> "_Timed":
        return self

    def __next__(self) -> Any:
        asked = time.time_ns()
        batch = next(self._batches)  # StopIteration ends the pass: nothing is recorded for it
        loaded = time.time_ns()
        self._recorder.span(timeline.DATALOADER, timeline.DATA_LOADING, asked, loaded)
        self._recorder.span(timeline.DATALOADER, timeline.WAIT_FOR_DATA, asked, time.time_ns())
        return batch

    def __len__(self) -> int:
        return len(self._batches)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batches, name)
