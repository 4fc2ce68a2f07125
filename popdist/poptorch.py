"""``popdist.poptorch.Options``: the ``poptorch.Options`` of one poprun instance's replicas.

As PopDist's: ``replicationFactor`` is the instance's local replicas and ``Distributed`` its index
among the instances, both from poprun's environment, and the calls that would contradict poprun
(``replicationFactor``, ``useIpuId``, ``Distributed.configureProcessId`` / ``disable`` /
``setEnvVarNames``) are refused. The emulation of the instance's model then covers the whole launch
(local replicas x instances), and its training keeps every instance's replicas identical.
"""

from __future__ import annotations

from typing import Any, NoReturn

import poptorch
from poptorch._options import _DistributedOptions

import popdist
from popdist._errors import PopDistUnsupportedError


def _refuse(call: str) -> NoReturn:
    raise poptorch.Error(f"Cannot call `{call}` with popdist.poptorch.Options: poprun's --num-replicas and "
                         f"--num-instances set the replicas and the instances.")


class _PoprunDistributed(_DistributedOptions):
    """``Options.Distributed`` fixed by poprun."""

    def __init__(self, process_id: int, num_processes: int) -> None:
        self.distributed_process_id, self.num_distributed_processes = process_id, num_processes

    def configureProcessId(self, process_id: int, num_processes: int = 1) -> NoReturn:  # noqa: N802
        _refuse("Distributed.configureProcessId")

    def disable(self) -> NoReturn:
        _refuse("Distributed.disable")

    def setEnvVarNames(self, var_num_processes: str, var_process_id: str) -> NoReturn:  # noqa: N802
        _refuse("Distributed.setEnvVarNames")


class Options(poptorch.Options):
    """``popdist.poptorch.Options(ipus_per_replica=None)``: ``poptorch.Options`` with poprun's
    replicas and instance; ``ipus_per_replica``, when given, must be poprun's ``--ipus-per-replica``."""

    def __init__(self, ipus_per_replica: int | None = None) -> None:
        super().__init__()
        info = popdist.instance_info()
        if ipus_per_replica is not None and not popdist.checkNumIpusPerReplica(ipus_per_replica):
            raise poptorch.Error(f"popdist.poptorch.Options(ipus_per_replica={ipus_per_replica}) differs from "
                                 f"poprun's --ipus-per-replica {info.ipus_per_replica}.")
        self.ipus_per_replica = info.ipus_per_replica if ipus_per_replica is None else int(ipus_per_replica)
        self.replication_factor = info.local_replicas
        self._distributed = _PoprunDistributed(info.index, info.instances)

    def replicationFactor(self, replication_factor: int) -> NoReturn:  # noqa: N802
        _refuse("replicationFactor")

    def useIpuId(self, ipu_id: int) -> NoReturn:  # noqa: N802
        _refuse("useIpuId")


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(name)
    raise PopDistUnsupportedError(f"popdist.poptorch.{name}")


__all__ = ["Options"]
