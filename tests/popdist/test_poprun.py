"""``poprun``: the environment each instance gets, its tagged output, how it stops, and its refusals.

The instances here are small Python programs without torch, so these launches take a fraction of a
second; the training launches are in test_training.py.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from popdist._env import PEER_LOST_EXIT_CODE
from popdist._poprun import _first_failure, main
from tests.popdist.conftest import poprun, subprocess_env

SHOW_ENV = textwrap.dedent("""\
    import json, os, sys
    names = ("POPDIST_NUM_TOTAL_REPLICAS", "POPDIST_NUM_LOCAL_REPLICAS", "POPDIST_REPLICA_INDEX_OFFSET",
             "POPDIST_NUM_IPUS_PER_REPLICA", "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE", "POPDIST_LOCAL_INSTANCE_INDEX",
             "POPVISION_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE", "MASTER_ADDR")
    print(json.dumps({n: os.environ.get(n) for n in names}))
    print("to stderr", file=sys.stderr)
    print("args", *sys.argv[1:])
    """)


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def tagged(text: str) -> dict[int, list[str]]:
    """Each instance's lines, by the tag poprun put in front of them."""
    lines: dict[int, list[str]] = {}
    for line in text.splitlines():
        assert line.startswith("[instance "), line
        tag, _, rest = line.partition("] ")
        lines.setdefault(int(tag.removeprefix("[instance ")), []).append(rest)
    return lines


def test_each_instance_gets_poprun_environment_and_its_output_comes_tagged(tmp_path: Path) -> None:
    # GIVEN 4 replicas of 2 IPUs over 2 instances on an IPU-POD16, the program given arguments of its own
    script = write(tmp_path, "show_env.py", SHOW_ENV)
    done = poprun(tmp_path, "--num-instances", "2", "--num-replicas=4", "--ipus-per-replica", "2", "--system", "POD16",
                  sys.executable, str(script), "--epochs", "3")
    assert done.returncode == 0, done.stderr
    out, err = tagged(done.stdout), tagged(done.stderr)
    # THEN each instance holds 2 replicas, the second from replica 2 on, as PopRun lays them out; mpirun's and
    # torch.distributed's ranks are the instance's index; each line came out tagged, on the stream it was written to
    for index in (0, 1):
        env = json.loads(out[index][0])
        assert env == {"POPDIST_NUM_TOTAL_REPLICAS": "4", "POPDIST_NUM_LOCAL_REPLICAS": "2",
                       "POPDIST_REPLICA_INDEX_OFFSET": str(2 * index), "POPDIST_NUM_IPUS_PER_REPLICA": "2",
                       "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE": "1", "POPDIST_LOCAL_INSTANCE_INDEX": str(index),
                       "POPVISION_SYSTEM": "IPU-POD16", "OMPI_COMM_WORLD_RANK": str(index),
                       "OMPI_COMM_WORLD_SIZE": "2", "RANK": str(index), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
        assert out[index][1] == "args --epochs 3"
        assert err[index] == ["to stderr"]


def test_only_output_from_instance_shows_that_instance_alone(tmp_path: Path) -> None:
    script = write(tmp_path, "show_env.py", SHOW_ENV)
    done = poprun(tmp_path, "--num-instances", "2", "--num-replicas", "2", "--only-output-from-instance", "1",
                  sys.executable, str(script))
    assert done.returncode == 0
    assert set(tagged(done.stdout)) == {1} and set(tagged(done.stderr)) == {1}


@pytest.mark.parametrize(("args", "sentence"), [
    (["--num-instances", "2", "--num-replicas", "3"],
     "poprun: --num-replicas 3 does not divide evenly among --num-instances 2: every instance runs the same number "
     "of replicas."),
    (["--num-instances", "0"], "poprun: --num-instances is 0; it must be at least 1."),
    (["--num-replicas", "8", "--ipus-per-replica", "4", "--system", "POD16"],
     "poprun: --num-replicas 8 x --ipus-per-replica 4 is 32 IPUs, more than the 16 of an IPU-POD16."),
    (["--num-replicas", "300"],
     "poprun: --num-replicas 300 x --ipus-per-replica 1 is 300 IPUs, more than the 256 of the largest system, an "
     "IPU-POD256."),
    (["--system", "POD17"],
     "poprun: Unknown system 'POD17'; choose one of IPU, IPU-POD4, IPU-POD16, IPU-POD64, IPU-POD128, IPU-POD256."),
    (["--vipu-partition=mine"],
     "poprun: --vipu-partition is not supported by popvision's poprun; docs/poptorch.md lists what is covered."),
    (["--num-instances", "two"], "poprun: Invalid value for '--num-instances': 'two' is not a valid integer."),
    (["--num-instances", "2", "--num-replicas", "2", "--only-output-from-instance", "2"],
     "poprun: --only-output-from-instance 2 names no instance; there are 2 (0 to 1)."),
])
def test_a_bad_option_is_one_sentence_and_exit_code_2(args: list[str], sentence: str, capsys) -> None:
    # WHEN poprun is given an option it cannot run (checked before anything starts)
    code = main([*args, sys.executable, "-c", "raise SystemExit(5)"])
    # THEN one sentence on standard error, exit code 2
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == sentence


def test_no_program_or_one_that_cannot_start_is_one_sentence_and_exit_code_2(tmp_path: Path, capsys) -> None:
    assert main(["--num-instances", "2", "--num-replicas", "2"]) == 2
    assert capsys.readouterr().err.startswith("poprun: no program to run; write it after the options")
    done = poprun(tmp_path, "--num-instances", "2", "--num-replicas", "2", str(tmp_path / "no-such-program"))
    assert done.returncode == 2
    assert done.stderr.strip() == f"poprun: cannot start {tmp_path / 'no-such-program'}: No such file or directory."


WAITS_OR_FAILS = textwrap.dedent("""\
    import os, pathlib, sys, time
    index = int(os.environ["RANK"])
    pathlib.Path(f"pid-{index}").write_text(str(os.getpid()))
    if index == 1:
        while not pathlib.Path("pid-0").exists():
            time.sleep(0.01)
        print("instance 1 fails", file=sys.stderr, flush=True)
        sys.exit(3)
    print("instance 0 waits", flush=True)
    time.sleep(120)
    print("instance 0 was not stopped", flush=True)
    """)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_failing_instance_stops_the_others_with_one_sentence_and_its_exit_code(tmp_path: Path) -> None:
    # GIVEN instance 1 exits with code 3 while instance 0 waits two minutes
    script = write(tmp_path, "waits_or_fails.py", WAITS_OR_FAILS)
    done = poprun(tmp_path, "--num-instances", "2", "--num-replicas", "2", sys.executable, str(script), timeout=60)
    # THEN poprun stopped instance 0 at once, said so in one sentence, and exits with instance 1's code
    assert done.returncode == 3
    assert done.stderr.splitlines()[-1] == "poprun: instance 1 failed with exit code 3; stopped the others."
    assert "[instance 1] instance 1 fails" in done.stderr and "[instance 0] instance 0 waits" in done.stdout
    assert "was not stopped" not in done.stdout and done.seconds < 30
    assert _gone(int((tmp_path / "pid-0").read_text()))


def test_ctrl_c_stops_every_instance_and_exits_130(tmp_path: Path) -> None:
    # GIVEN two instances that wait two minutes once started
    script = write(tmp_path, "waits.py", "import os, time\nprint('ready', os.getpid(), flush=True)\ntime.sleep(120)\n")
    launch = subprocess.Popen([sys.executable, "-m", "popdist._poprun", "--num-instances", "2", "--num-replicas", "2",
                               sys.executable, str(script)], cwd=tmp_path, env=subprocess_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = [int(launch.stdout.readline().split()[-1]) for _ in range(2)]
    # WHEN poprun gets Ctrl-C
    start = time.monotonic()
    launch.send_signal(signal.SIGINT)
    _, err = launch.communicate(timeout=30)
    # THEN it stopped both instances and exits with 130
    assert launch.returncode == 130 and time.monotonic() - start < 10
    assert err.strip().splitlines()[-1] == "poprun: interrupted; stopped all 2 instance(s)."
    assert all(_gone(pid) for pid in pids)


@pytest.mark.parametrize(("ends", "named"), [
    ([(0, PEER_LOST_EXIT_CODE), (1, 3)], (1, 3)),   # instance 0 saw instance 1 leave before instance 1's exit ended
    ([(1, 3), (0, PEER_LOST_EXIT_CODE)], (1, 3)),
    ([(0, 0), (1, PEER_LOST_EXIT_CODE)], (1, PEER_LOST_EXIT_CODE)),  # no other failure to name
    ([(0, 0), (1, 0)], None),
])
def test_poprun_names_the_instance_that_failed_not_the_one_that_lost_it(ends, named) -> None:
    ended: queue.Queue = queue.Queue()
    for end in ends:
        ended.put(end)
    assert _first_failure(ended, len(ends)) == named
