"""The Dask cluster `popvision tune` searches on: an existing one at a scheduler's address, or a local one."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import warnings
from collections.abc import Iterator
from typing import Any

from popvision_py.errors import ConfigError

# the environment variable a spawned worker reads its logging level from when it imports distributed
QUIET_WORKERS = "DASK_LOGGING__DISTRIBUTED"
# the module each local worker runs as it starts, a worker started in place of one that died included
WORKER_SETUP = "popvision_py.tune.worker_setup"
# the packages whose log lines a search keeps off the user's terminal (``quiet_dask``)
QUIET_PACKAGES = ("distributed", "tornado", "bokeh")


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, workers: int | None = None) -> Iterator[Any]:
    """A Dask client, closed (with its local cluster) on leaving: of the cluster at ``scheduler``
    (tcp://HOST:PORT), or of a local cluster of ``workers`` processes (this machine's cores by default),
    one thread each.

    A scheduler address that is not tcp://..., that nothing answers at, or whose cluster has no worker
    within 30 s is a ConfigError sentence. The local workers ignore Ctrl-C and log nothing: the process
    that holds the client acts on Ctrl-C for them (``WORKER_SETUP`` makes it so for a worker started later).
    """
    from distributed import Client, LocalCluster

    if scheduler:
        if "://" not in scheduler:
            raise ConfigError(f"--scheduler takes a Dask scheduler's address as tcp://HOST:PORT, not {scheduler!r}.")
        try:
            _reachable(scheduler)
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError, ValueError) as exc:
            text = str(exc).strip().splitlines()
            raise ConfigError(f"No Dask scheduler answers at {scheduler} ({text[0] if text else type(exc).__name__}); "
                              f"start one with `dask scheduler`, or leave --scheduler out for a local "
                              f"cluster.") from None
        try:
            try:
                client.wait_for_workers(1, timeout=30)
            except TimeoutError:
                raise ConfigError(f"The Dask scheduler at {scheduler} has no workers; start some with "
                                  f"`dask worker {scheduler}`.") from None
            yield client
        finally:
            client.close()
        return
    # The workers start with Ctrl-C ignored (a disposition a spawned process keeps): Ctrl-C in a terminal
    # reaches every process of the group, and only this one acts on it (keeps what finished, closes the cluster).
    # Their log lines (a task cancelled by Ctrl-C, say) stay quiet too: a spawned worker reads its logging
    # levels from the environment when it imports distributed.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    level = os.environ.get(QUIET_WORKERS)
    os.environ[QUIET_WORKERS] = "critical"
    try:
        with warnings.catch_warnings():
            # the scheduler's health endpoint takes another port when 8787 is taken (another search): no news
            warnings.filterwarnings("ignore", "Port .* is already in use", UserWarning)
            cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, processes=True, threads_per_worker=1,
                                   dashboard_address=None, preload=[WORKER_SETUP])
    finally:
        signal.signal(signal.SIGINT, previous)
        if level is None:
            os.environ.pop(QUIET_WORKERS, None)
        else:
            os.environ[QUIET_WORKERS] = level
    try:
        with Client(cluster) as client:
            yield client
    finally:
        cluster.close()


def _reachable(address: str) -> None:
    """OSError at once when nothing listens at a tcp:// address (Dask's client would retry for its whole timeout)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address)
    if parts.scheme == "tcp" and parts.hostname and parts.port:
        socket.create_connection((parts.hostname, parts.port), timeout=10).close()


def scheduler_client(scheduler: str | None) -> Any:
    """A context of the Dask client of the cluster at ``scheduler`` (``dask_client``'s sentences for an address of
    another form, nothing answering, no workers), or of None without one (nothing of Dask imported): what a
    command's ``--scheduler`` gives."""
    if scheduler is None:
        return contextlib.nullcontext(None)
    if not scheduler.strip():
        raise ConfigError("--scheduler is empty; give a Dask scheduler's address, tcp://HOST:PORT.")
    quiet_dask()
    return dask_client(scheduler)


def quiet_dask() -> None:
    """Dask's own log lines (worker start, shutdown, a cancelled task, a long garbage collection) are not the user's
    business.

    distributed sets some of its loggers' levels as it is imported (``tornado.application`` at error, which printed
    the traceback of distributed's own ``sync`` cancel when Ctrl-C came before a call's future existed;
    ``distributed.gc`` at warning), so it is imported first, and every logger of distributed, tornado and bokeh
    there is then is set after it (those made later take their parent's level).
    """
    import distributed  # noqa: F401

    made = [name for name in logging.root.manager.loggerDict if name.split(".")[0] in QUIET_PACKAGES]
    for name in {*QUIET_PACKAGES, *made}:
        logging.getLogger(name).setLevel(logging.CRITICAL)
