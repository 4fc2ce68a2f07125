"""``poprun``: launch a PopDist program as several instances on this machine, as Graphcore's PopRun does.

``poprun [--num-instances N] [--num-replicas R] [--ipus-per-replica K] [--system S] PROGRAM ARGS``
starts N processes of ``PROGRAM ARGS``, each with PopRun's environment (``POPDIST_*``: its share of
the R replicas, ``popdist._env``), mpirun's rank variables (which ``poptorch.Options`` reads, as
PopTorch's) and the rendezvous of ``torch.distributed`` (a free port on loopback) over which the
instances reduce their gradients. Every line an instance writes comes out tagged ``[instance I]``
on poprun's standard output or error. When an instance fails the others are stopped (SIGTERM,
then SIGKILL after a grace period) and poprun exits with the failed instance's code; on Ctrl-C it
stops them all and exits with 130. A bad option is one sentence and exit code 2.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

import click

from popdist._env import PEER_LOST_EXIT_CODE, launch_environment
from popvision_py.errors import ConfigError

# How long a stopped instance has to exit after SIGTERM before it is killed.
GRACE_S = 5.0
POLL_S = 0.02


class Stopped(Exception):
    """poprun itself was interrupted (Ctrl-C, SIGTERM): stop the instances and exit with ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Launch:
    """What poprun was asked to start."""

    program: tuple[str, ...]
    instances: int
    replicas: int
    ipus_per_replica: int
    system: str | None
    only_output_from: int | None


def check(launch: Launch) -> Launch:
    """The launch with its system named canonically; ConfigError, one sentence, when it cannot run."""
    if not launch.program:
        raise ConfigError("no program to run; write it after the options, as in "
                          "`poprun --num-instances 2 --num-replicas 4 python train.py`.")
    for flag, value in (("--num-instances", launch.instances), ("--num-replicas", launch.replicas),
                        ("--ipus-per-replica", launch.ipus_per_replica)):
        if value < 1:
            raise ConfigError(f"{flag} is {value}; it must be at least 1.")
    if launch.replicas % launch.instances:
        raise ConfigError(f"--num-replicas {launch.replicas} does not divide evenly among --num-instances "
                          f"{launch.instances}: every instance runs the same number of replicas.")
    if launch.only_output_from is not None and not 0 <= launch.only_output_from < launch.instances:
        raise ConfigError(f"--only-output-from-instance {launch.only_output_from} names no instance; there are "
                          f"{launch.instances} (0 to {launch.instances - 1}).")
    from engine.targets import make_target
    from engine.rules import LARGEST_SYSTEM, SYSTEMS

    system = make_target(system=launch.system).system if launch.system else None  # an unknown name: its sentence
    ipus = launch.replicas * launch.ipus_per_replica
    holds = SYSTEMS[system or LARGEST_SYSTEM]
    if ipus > holds:
        where = f"an {system}" if system else f"the largest system, an {LARGEST_SYSTEM}"
        raise ConfigError(f"--num-replicas {launch.replicas} x --ipus-per-replica {launch.ipus_per_replica} is {ipus} "
                          f"IPUs, more than the {holds} of {where}.")
    return Launch(launch.program, launch.instances, launch.replicas, launch.ipus_per_replica, system,
                  launch.only_output_from)


def _free_port() -> int:
    """A TCP port free on loopback now, for the first instance's rendezvous store."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def instance_environment(launch: Launch, index: int, port: int, base: dict[str, str]) -> dict[str, str]:
    """Instance ``index``'s environment: ``base`` with PopRun's, mpirun's and torch.distributed's variables."""
    n = launch.instances
    env = dict(base)
    env.update(launch_environment(index, n, launch.replicas, launch.ipus_per_replica, launch.system))
    env.update({
        # mpirun's (PopRun launches through it): poptorch.Options reads the process id from these, as PopTorch does
        "OMPI_COMM_WORLD_RANK": str(index), "OMPI_COMM_WORLD_SIZE": str(n),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(index), "OMPI_COMM_WORLD_LOCAL_SIZE": str(n),
        # torch.distributed's rendezvous: the instances reduce their gradients over gloo on loopback
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(index), "WORLD_SIZE": str(n),
        "LOCAL_RANK": str(index),
        # line by line, so the tagged output comes as it is written and nothing is lost when an instance is stopped
        "PYTHONUNBUFFERED": "1",
    })
    if "GLOO_SOCKET_IFNAME" not in env and any(name == "lo" for _, name in socket.if_nameindex()):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


class _Output:
    """Copies the instances' lines to poprun's streams, each tagged with its instance."""

    def __init__(self, only_from: int | None) -> None:
        self.only_from = only_from
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def follow(self, index: int, source: BinaryIO, target: BinaryIO) -> None:
        thread = threading.Thread(target=self._copy, args=(index, source, target), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _copy(self, index: int, source: BinaryIO, target: BinaryIO) -> None:
        tag = f"[instance {index}] ".encode()
        shown = self.only_from is None or self.only_from == index
        for line in iter(source.readline, b""):
            if shown:
                with self.lock:
                    try:
                        target.write(tag + line if line.endswith(b"\n") else tag + line + b"\n")
                        target.flush()
                    except OSError:  # poprun's own output closed (`poprun ... | head`): keep draining the instance
                        shown = False
        source.close()

    def drain(self, timeout: float = GRACE_S) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def _stop(processes: Sequence[subprocess.Popen]) -> None:
    """SIGTERM each running instance's process group, SIGKILL what is left after the grace period."""
    running = [p for p in processes if p.poll() is None]
    for p in running:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while any(p.poll() is None for p in running) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for p in running:
        if p.poll() is None:
            _signal_group(p, signal.SIGKILL)
        p.wait()


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)  # each instance leads its own group (start_new_session): its children too
    except ProcessLookupError:
        pass


def _failure(index: int, code: int) -> tuple[str, int]:
    """The sentence and poprun's exit code for instance ``index`` ending with ``code``."""
    if code < 0:
        name = signal.Signals(-code).name
        return f"poprun: instance {index} was killed by {name}; stopped the others.", 128 - code
    return f"poprun: instance {index} failed with exit code {code}; stopped the others.", code


def run(launch: Launch) -> int:
    """Start the instances, copy their output, wait; the exit code poprun ends with."""
    port = _free_port()
    output = _Output(launch.only_output_from)
    processes: list[subprocess.Popen] = []
    ended: queue.Queue[tuple[int, int]] = queue.Queue()  # (instance, exit code) in the order they end
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def interrupted(signum: int, frame: object) -> None:
        raise Stopped(128 + signum)

    def watch(index: int, process: subprocess.Popen) -> None:
        ended.put((index, process.wait()))

    for sig in previous:
        signal.signal(sig, interrupted)
    try:
        for index in range(launch.instances):
            env = instance_environment(launch, index, port, dict(os.environ))
            try:
                process = subprocess.Popen(launch.program, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, start_new_session=True)
            except OSError as exc:
                _stop(processes)
                print(f"poprun: cannot start {launch.program[0]}: {exc.strerror or exc}.", file=sys.stderr)
                return 2
            processes.append(process)
            output.follow(index, process.stdout, sys.stdout.buffer)
            output.follow(index, process.stderr, sys.stderr.buffer)
            threading.Thread(target=watch, args=(index, process), daemon=True).start()
        failed = _first_failure(ended, len(processes))
        if failed is None:
            output.drain()
            return 0
        _quiet()
        _stop(processes)
        output.drain()
        sentence, code = _failure(*failed)
        print(sentence, file=sys.stderr, flush=True)
        return code
    except (Stopped, KeyboardInterrupt) as exc:
        _quiet()
        _stop(processes)
        output.drain()
        print(f"poprun: interrupted; stopped all {len(processes)} instance(s).", file=sys.stderr, flush=True)
        return exc.code if isinstance(exc, Stopped) else 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _first_failure(ended: queue.Queue, count: int) -> tuple[int, int] | None:
    """The (instance, exit code) that failed first, or None when all ``count`` ended well. An
    instance that stopped because another left a collective (``PEER_LOST_EXIT_CODE``) may end before
    the one that failed (whose exit takes longer than the broken connection): for a grace period
    poprun waits for another failure to name instead."""
    lost: tuple[int, int] | None = None
    deadline = None
    for _ in range(count):
        got = _next(ended, deadline)
        if got is None:
            break
        if got[1] == PEER_LOST_EXIT_CODE:
            lost = lost or got
            deadline = deadline or time.monotonic() + GRACE_S
        elif got[1] != 0:
            return got
    return lost


def _next(ended: queue.Queue, deadline: float | None) -> tuple[int, int] | None:
    """The next instance to end, or None at ``deadline``; waiting in short slices, so that Ctrl-C is seen at once."""
    while deadline is None or time.monotonic() < deadline:
        try:
            return ended.get(timeout=0.2)
        except queue.Empty:
            continue
    return None


def _quiet() -> None:
    """A second Ctrl-C while the instances are being stopped does not interrupt the stopping."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


@click.command(context_settings={"allow_interspersed_args": False, "help_option_names": ["-h", "--help"]})
@click.option("--num-instances", type=int, default=1, show_default=True,
              help="The number of instances; the replicas are divided evenly among them.")
@click.option("--num-replicas", type=int, default=1, show_default=True, help="The total number of replicas.")
@click.option("--ipus-per-replica", type=int, default=1, show_default=True, help="The number of IPUs per replica.")
@click.option("--system", default=None,
              help="The IPU system the emulation models (IPU-POD4, POD16, ...; popvision's, PopRun takes it from the "
                   "V-IPU partition); default: the smallest that holds replicas x IPUs per replica.")
@click.option("--only-output-from-instance", type=int, default=None,
              help="Show only this instance's output (the others' is read and dropped).")
@click.option("--mpi-global-args", default=None, hidden=True)
@click.option("--mpi-local-args", default=None, hidden=True)
@click.argument("program", nargs=-1, type=click.UNPROCESSED)
def command(num_instances: int, num_replicas: int, ipus_per_replica: int, system: str | None,
            only_output_from_instance: int | None, mpi_global_args: str | None, mpi_local_args: str | None,
            program: tuple[str, ...]) -> int:
    """Launch PROGRAM [ARGS] as --num-instances instances sharing --num-replicas replicas (docs/poptorch.md).

    --mpi-global-args and --mpi-local-args are accepted and ignored: there is no mpirun here, and every
    line is tagged with its instance."""
    launch = check(Launch(tuple(program), num_instances, num_replicas, ipus_per_replica, system,
                          only_output_from_instance))
    return run(launch)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``poprun`` console script: its exit code."""
    try:
        return command.main(args=list(sys.argv[1:] if argv is None else argv), prog_name="poprun",
                            standalone_mode=False)
    except click.exceptions.NoSuchOption as exc:
        print(f"poprun: {exc.option_name} is not supported by popvision's poprun; docs/poptorch.md lists what is "
              f"covered.", file=sys.stderr)
    except click.ClickException as exc:
        print(f"poprun: {exc.format_message()}", file=sys.stderr)
    except ConfigError as exc:
        print(f"poprun: {exc}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
