"""What each worker of `popvision tune`'s local cluster does as it starts (Dask's preload: ``dask_setup``)."""

from __future__ import annotations

import signal
import threading
from typing import Any


def dask_setup(worker: Any) -> None:
    """Ctrl-C is ignored in this worker, Dask's log lines are quiet, and the emulator's progress bars share a thread
    lock: the process that holds the client acts on Ctrl-C for the whole search, a cancelled task is not the user's
    business, and a worker's bars (switched off) need no lock across processes.

    The first workers are started with Ctrl-C ignored and quiet already (``cluster.dask_client``); this covers a
    worker the cluster starts later in place of one that died (out of memory, say), which would otherwise print a
    traceback and log lines of its own under the search's last line. tqdm's default lock holds a multiprocessing
    semaphore, in a spawned worker a named one the resource tracker keeps account of: a worker the cluster kills as
    it closes (after Ctrl-C, on a loaded machine) never gives it back, and the tracker then prints a warning there
    too. This runs before the worker takes any task, so no bar holds the lock it replaces.
    """
    from tqdm import tqdm

    from popvision_py.tune.cluster import quiet_dask

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_dask()
    tqdm.set_lock(threading.RLock())
