"""What each worker of `popvision tune`'s local cluster does as it starts (Dask's preload: ``dask_setup``)."""

from __future__ import annotations

import signal
import threading
from typing import Any


def dask_setup(worker: Any) -> None:
    """Ctrl-C is ignored in this worker, and Dask's log lines are quiet: the process that holds the client acts
    on Ctrl-C for the whole search, and a cancelled task is not the user's business.

    The first workers are started so already (``cluster.dask_client``); this covers a worker the cluster
    starts later in place of one that died (out of memory, say), which would otherwise print a traceback and
    log lines of its own under the search's last line.
    """
    from popvision_py.tune.cluster import quiet_dask

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_dask()
