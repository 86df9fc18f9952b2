"""What ``make ui`` runs: a local Prefect server (SQLite under ``.prefect/``), the served deployment and the
file server (``flows.files``). Ctrl-C stops them all.

    python -m flows.ui [--port 4200] [--cron "0 3 * * *"] [--profile tiny] [--target package]
                       [--dask tcp://scheduler:8786] [--train-processes 8]

The options but ``--port``, ``--home`` and ``--files-port`` are the deployment's (``python -m flows.deploy``).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from flows.artifacts import REPORTS_URL


def server_env(home: Path, port: int) -> dict:
    """The project's own Prefect settings: its home (database, logs), the local API, no analytics."""
    return {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_URL": f"http://127.0.0.1:{port}",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def start_server(home: Path, port: int, timeout: float = 120) -> subprocess.Popen:
    """``prefect server start`` on 127.0.0.1:``port``; returns once ``/api/health`` answers."""
    import httpx

    home.mkdir(parents=True, exist_ok=True)
    log = open(home / "server.log", "ab")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1",
                             "--port", str(port)], env=server_env(home, port), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited with {proc.returncode}; see {home / 'server.log'}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"prefect server did not answer on port {port} within {timeout:.0f} s; see {home / 'server.log'}")


def stop(proc: subprocess.Popen, *, group: bool = False) -> None:
    """SIGTERM to ``proc`` (with ``group``, to its process group: dvc, the stage, its workers), SIGKILL after 30 s."""
    kill = (lambda sig: os.killpg(proc.pid, sig)) if group else proc.send_signal
    try:
        kill(signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        kill(signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.ui", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n")[-1].strip())
    ap.add_argument("--port", type=int, default=4200)
    ap.add_argument("--home", type=Path, default=Path(".prefect"), help="PREFECT_HOME (default: .prefect)")
    ap.add_argument("--files-port", type=int, help="the reports file server's port (default: --port + 1)")
    args, deploy_args = ap.parse_known_args(argv)  # the rest: the deployment's options (flows.deploy)
    home = args.home.resolve()
    server = start_server(home, args.port)
    files_port = args.files_port or args.port + 1
    files = subprocess.Popen([sys.executable, "-m", "flows.files", "--root", ".", "--port", str(files_port)],
                             stdout=subprocess.DEVNULL)
    env = {**server_env(home, args.port), REPORTS_URL: f"http://127.0.0.1:{files_port}"}
    print(f"Prefect UI: http://127.0.0.1:{args.port}  (PREFECT_HOME {home}); reports and Bentos: "
          f"http://127.0.0.1:{files_port}/reports/; Ctrl-C stops", flush=True)
    try:
        return subprocess.call([sys.executable, "-m", "flows.deploy", *deploy_args], env=env)
    except KeyboardInterrupt:
        return 0
    finally:
        stop(files)
        stop(server)


if __name__ == "__main__":
    sys.exit(main())
