"""popvision's ``popdist``: Graphcore's PopDist API for programs that ``poprun`` launches here.

``poprun --num-instances N --num-replicas R python train.py`` (``popdist._poprun``) starts N
processes on this machine with PopRun's environment; in each, the getters below read it
(``getNumLocalReplicas()`` is R / N, ``getInstanceIndex()`` this process's place), and
``popdist.poptorch.Options()`` makes the ``poptorch.Options`` of the instance's replicas. Each
instance trains its replicas on the CPU; their gradients are averaged over the instances before every
optimiser step (``popdist._backend``), so all replicas keep identical weights, as on IPUs.
Outside poprun the getters give the single-instance values (one instance, one replica) and
``isPopdistEnvSet()`` is False. Any other PopDist name is an error that names it
(docs/poptorch.md lists what is covered).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from popdist import _env
from popdist._env import InstanceInfo
from popdist._errors import PopDistError, PopDistUnsupportedError

# The PopDist release whose API this follows (SDK 3.3, the last public one), marked as popvision's.
__version__ = "3.3.0+popvision"

T = TypeVar("T")


def isPopdistEnvSet() -> bool:  # noqa: N802 (PopDist's names)
    """True in a process that PopRun started (its ``POPDIST_NUM_TOTAL_REPLICAS`` is set)."""
    return _env.is_set()


def instance_info() -> InstanceInfo:
    """This instance's place in the launch, in one object (popvision's; the getters below give the
    same figures one at a time): index, instances, local and total replicas, replica offset, IPUs
    per replica, the system poprun named, and whether poprun started it."""
    return _env.instance_info()


def getNumTotalReplicas() -> int:  # noqa: N802
    """The replicas of all instances (``POPDIST_NUM_TOTAL_REPLICAS``; 1 outside poprun)."""
    return _env.instance_info().total_replicas


def getNumLocalReplicas() -> int:  # noqa: N802
    """This instance's replicas (``POPDIST_NUM_LOCAL_REPLICAS``; 1 outside poprun): its
    ``poptorch.Options().replicationFactor``."""
    return _env.instance_info().local_replicas


def getReplicaIndexOffset() -> int:  # noqa: N802
    """The global index of this instance's first replica (``POPDIST_REPLICA_INDEX_OFFSET``; 0 outside poprun)."""
    return _env.instance_info().replica_offset


def getNumIpusPerReplica() -> int:  # noqa: N802
    """IPUs each replica spans (``POPDIST_NUM_IPUS_PER_REPLICA``; 1 outside poprun)."""
    return _env.instance_info().ipus_per_replica


def getNumInstances() -> int:  # noqa: N802
    """The instances poprun started: total replicas over local replicas (every instance has as many)."""
    return _env.instance_info().instances


def getInstanceIndex() -> int:  # noqa: N802
    """This instance's index in ``[0, getNumInstances())``: the replica offset over the local replicas."""
    return _env.instance_info().index


def getLocalInstanceIndex() -> int:  # noqa: N802
    """This instance's index among those on its host (``POPDIST_LOCAL_INSTANCE_INDEX``; 0 outside
    poprun); poprun here starts every instance on this machine."""
    return _env.instance_info().local_index


def isUniformReplicasPerInstance() -> bool:  # noqa: N802
    """Every instance has the same number of replicas: always, with poprun's layout."""
    return True


def checkNumIpusPerReplica(ipus_per_replica: int) -> bool:  # noqa: N802
    """False when poprun gave another number of IPUs per replica than ``ipus_per_replica``."""
    return not _env.is_set() or _env.instance_info().ipus_per_replica == int(ipus_per_replica)


def init() -> None:
    """Start PopDist's backend, the instances' process group, now rather than at the first
    collective (``execute_on_instances``, a distributed training step); it is finalised when the
    process exits. Outside poprun, or with one instance, there is nothing to join."""
    info = _env.instance_info()
    if info.instances > 1:
        from popdist import _backend

        _backend.initialise(info.instances)


def isBackendInitialized() -> bool:  # noqa: N802
    """The instances' process group exists in this process."""
    if _env.instance_info().instances == 1:
        return False
    from popdist import _backend

    return _backend.is_initialised()


def execute_on_instances(instances: Iterable[int], func: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """``func(*args, **kwargs)`` on the instances listed only (its result there, None on the others);
    collectives inside it (a distributed training step) reach only those instances. Every instance
    must call it, as PopDist's."""
    wanted = {int(i) for i in instances}
    count = getNumInstances()
    outside = sorted(i for i in wanted if not 0 <= i < count)
    if outside:
        raise PopDistError(f"popdist.execute_on_instances: instance {outside[0]} does not exist; poprun started "
                           f"{count} (0 to {count - 1}).")
    if count == 1:
        return func(*args, **kwargs) if wanted else None
    from popdist import _backend

    _backend.initialise(count)
    with _backend.narrowed(wanted) as member:
        return func(*args, **kwargs) if member else None


# Submodules: `import popdist.poptorch` loads it; until then Python's own AttributeError, so that
# `from popdist import poptorch` imports it.
_SUBMODULES = frozenset({"poptorch"})


def __getattr__(name: str) -> Any:
    if name.startswith("_") or name in _SUBMODULES:
        raise AttributeError(f"module 'popdist' has no attribute {name!r}")
    raise PopDistUnsupportedError(f"popdist.{name}")


__all__ = [
    "InstanceInfo", "PopDistError", "PopDistUnsupportedError", "checkNumIpusPerReplica", "execute_on_instances",
    "getInstanceIndex", "getLocalInstanceIndex", "getNumInstances", "getNumIpusPerReplica", "getNumLocalReplicas",
    "getNumTotalReplicas", "getReplicaIndexOffset", "init", "instance_info", "isBackendInitialized",
    "isPopdistEnvSet", "isUniformReplicasPerInstance",
]
