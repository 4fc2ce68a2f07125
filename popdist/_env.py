"""What PopRun tells each instance, read from the environment variables it sets.

PopRun (Graphcore's ``poprun``, and popvision's: ``popdist._poprun``) starts every instance with
the replica layout in ``POPDIST_*`` variables; PopDist's getters read them and give the
single-instance values when they are unset. The number of instances and this instance's index are
not variables of their own: with the same number of replicas on every instance (PopRun's layout)
they are the total replicas over the local ones and the replica offset over the local replicas.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from popdist._errors import PopDistError

# The variables PopRun sets for each instance (PopRun user guide; the mpirun command `poprun -vv` prints).
NUM_TOTAL_REPLICAS = "POPDIST_NUM_TOTAL_REPLICAS"
NUM_LOCAL_REPLICAS = "POPDIST_NUM_LOCAL_REPLICAS"
REPLICA_INDEX_OFFSET = "POPDIST_REPLICA_INDEX_OFFSET"
NUM_IPUS_PER_REPLICA = "POPDIST_NUM_IPUS_PER_REPLICA"
UNIFORM_REPLICAS_PER_INSTANCE = "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE"
LOCAL_INSTANCE_INDEX = "POPDIST_LOCAL_INSTANCE_INDEX"
# popvision's own: the IPU system the emulation models (poprun --system); none chooses the smallest that holds the run.
SYSTEM = "POPVISION_SYSTEM"
# The exit code of an instance that stopped because another left a collective (its gradient reduction):
# poprun then names the instance that failed first, not this one.
PEER_LOST_EXIT_CODE = 86


@dataclass(frozen=True)
class InstanceInfo:
    """One instance's place in a PopRun launch (a single instance outside PopRun)."""

    index: int
    instances: int
    local_replicas: int
    total_replicas: int
    replica_offset: int
    ipus_per_replica: int
    local_index: int
    system: str | None
    under_poprun: bool

    @property
    def replicas(self) -> range:
        """The global indices of this instance's replicas."""
        return range(self.replica_offset, self.replica_offset + self.local_replicas)


def is_set(environ: Mapping[str, str] | None = None) -> bool:
    """PopRun started this process: the total number of replicas is in the environment."""
    return NUM_TOTAL_REPLICAS in (os.environ if environ is None else environ)


def _whole(environ: Mapping[str, str], name: str, default: int, least: int) -> int:
    text = environ.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise PopDistError(f"{name} is {text!r}, not a whole number; PopRun sets it, so start the program "
                           f"with poprun.") from None
    if value < least:
        raise PopDistError(f"{name} is {value}; it must be at least {least}.")
    return value


def instance_info(environ: Mapping[str, str] | None = None) -> InstanceInfo:
    """This instance's ``InstanceInfo`` from the environment (``os.environ`` by default); one
    sentence when PopRun's variables contradict each other."""
    env = os.environ if environ is None else environ
    total = _whole(env, NUM_TOTAL_REPLICAS, 1, 1)
    local = _whole(env, NUM_LOCAL_REPLICAS, 1, 1)
    offset = _whole(env, REPLICA_INDEX_OFFSET, 0, 0)
    if total % local:
        raise PopDistError(f"{NUM_TOTAL_REPLICAS}={total} is not a multiple of {NUM_LOCAL_REPLICAS}={local}: "
                           f"PopDist needs the same number of replicas on every instance.")
    if offset % local or offset >= total:
        raise PopDistError(f"{REPLICA_INDEX_OFFSET}={offset} is not the first replica of an instance of {local} "
                           f"replica(s) among {total}.")
    return InstanceInfo(index=offset // local, instances=total // local, local_replicas=local, total_replicas=total,
                        replica_offset=offset, ipus_per_replica=_whole(env, NUM_IPUS_PER_REPLICA, 1, 1),
                        local_index=_whole(env, LOCAL_INSTANCE_INDEX, 0, 0), system=env.get(SYSTEM) or None,
                        under_poprun=is_set(env))


def poprun_instance() -> InstanceInfo | None:
    """This instance's ``InstanceInfo`` when PopRun started it, else None."""
    return instance_info() if is_set() else None


def instance_directory(directory: Path) -> Path:
    """Where this process writes what would go in ``directory``: ``directory/instance-I`` for
    instance I of a poprun launch (the instances would overwrite each other's), else ``directory``."""
    instance = poprun_instance()
    return directory if instance is None else directory / f"instance-{instance.index}"


def launch_environment(index: int, instances: int, replicas: int, ipus_per_replica: int,
                       system: str | None) -> dict[str, str]:
    """The ``POPDIST_*`` variables PopRun gives instance ``index`` of ``instances`` sharing
    ``replicas`` (all on this host), and popvision's system."""
    local = replicas // instances
    env = {NUM_TOTAL_REPLICAS: str(replicas), NUM_IPUS_PER_REPLICA: str(ipus_per_replica),
           NUM_LOCAL_REPLICAS: str(local), UNIFORM_REPLICAS_PER_INSTANCE: "1",
           REPLICA_INDEX_OFFSET: str(index * local), LOCAL_INSTANCE_INDEX: str(index)}
    if system:
        env[SYSTEM] = system
    return env
