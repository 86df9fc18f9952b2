"""Start a training stage in N data-parallel processes when ``LMPIPE_TRAIN_PROCESSES`` > 1 (the Prefect flow
sets it): the stage's plain ``python -m stages.pretrain ...`` starts itself again under ``LMPIPE_TRAIN_LAUNCHER``
(torchrun, the default, or accelerate) with ``LMPIPE_TRAIN_LAUNCH_ARGS`` (e.g. several machines' rendezvous).
The environment's business, not a param: N processes give the outputs of one at N times the micro-batch.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Sequence

PROCESSES = "LMPIPE_TRAIN_PROCESSES"
LAUNCHER = "LMPIPE_TRAIN_LAUNCHER"
LAUNCH_ARGS = "LMPIPE_TRAIN_LAUNCH_ARGS"
LAUNCHERS = ("torchrun", "accelerate")
INSIDE = ("LOCAL_RANK", "WORLD_SIZE")  # set by both launchers in every process they start


def launch_command(module: str, argv: Sequence[str], processes: int, launcher: str = "torchrun",
                   extra: Sequence[str] = ()) -> list[str]:
    """The command that runs ``python -m module argv`` in ``processes`` processes per machine."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"{LAUNCHER}={launcher!r}: must be one of {', '.join(LAUNCHERS)}")
    if processes < 1:
        raise ValueError(f"{PROCESSES}={processes}: must be >= 1")
    extra = list(extra)
    multi_node = any(a.startswith(("--nnodes", "--rdzv", "--num_machines", "--main_process_ip")) for a in extra)
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *([] if multi_node else ["--standalone"]),
                "--nproc_per_node", str(processes), *extra, "-m", module, *argv]
    # accelerate counts processes over all machines; --multi_gpu picks DDP (gloo on a CPU).
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            *extra, "-m", module, *argv]


def from_environment(module: str, argv: Sequence[str]) -> list[str] | None:
    """The launcher command the environment asks for, or None: one process wanted, or already launched."""
    if any(k in os.environ for k in INSIDE):
        return None
    raw = os.environ.get(PROCESSES, "").strip() or "1"
    try:
        processes = int(raw)
    except ValueError:
        raise ValueError(f"{PROCESSES}={raw!r}: not a whole number") from None
    extra = shlex.split(os.environ.get(LAUNCH_ARGS, ""))
    if processes <= 1 and not extra:
        return None
    return launch_command(module, argv, processes, os.environ.get(LAUNCHER, "").strip() or "torchrun", extra)


def relaunch(module: str, argv: Sequence[str]) -> int | None:
    """Run this stage under the launcher the environment asks for and return its exit code; None when this
    process should train by itself."""
    cmd = from_environment(module, argv)
    if cmd is None:
        return None
    print(f"[launch] {shlex.join(cmd[1:])}", file=sys.stderr, flush=True)
    return subprocess.call(cmd)
