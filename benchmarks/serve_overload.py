"""Overload check: the served Bento with a short batch latency under a burst it cannot serve in time; counts the
answers (status, Retry-After) and the server's log lines per refusal.

    .venv/bin/python benchmarks/serve_overload.py dist/lm-pipeline-<version>.bento --max-latency-ms 200 \
        --out benchmarks/results/serve_overload.json

The .bento is imported into a temporary BENTOML_HOME; its ``bento_config.json`` gets ``--max-latency-ms`` (the
batcher refuses requests it predicts cannot finish within it), then ``--clients`` threads send ``--requests``
``classify`` calls of 64 long texts each.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import httpx
from serve_bento import wait_ready  # benchmarks/ is the script's folder, first on sys.path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bento", type=Path)
    ap.add_argument("--max-latency-ms", type=int, default=200)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--port", type=int, default=3917)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="overload-"))
    env = {**os.environ, "BENTOML_HOME": str(home), "BENTOML_DO_NOT_TRACK": "True", "HF_HUB_OFFLINE": "1"}
    bin_dir = Path(sys.executable).parent
    subprocess.run([str(bin_dir / "bentoml"), "import", str(args.bento.resolve())], env=env, check=True,
                   capture_output=True)
    folder = next((home / "bentos").glob("*/*/"))
    config_path = folder / "src" / "bento_config.json"
    config = json.loads(config_path.read_text())
    config["batching"]["max_latency_ms"] = args.max_latency_ms
    config_path.chmod(0o644)
    config_path.write_text(json.dumps(config))
    log_path = home / "server.log"
    tag = f"{folder.parent.name}:{folder.name}"
    with open(log_path, "w") as log:
        server = subprocess.Popen([str(bin_dir / "bentoml"), "serve", tag, "--port", str(args.port)], env=env,
                                  stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{args.port}"
    try:
        wait_ready(url, tag)
        texts = ["An IRC client for the terminal with scripting and plugins. " * 30] * 64

        def one(_):
            r = httpx.post(f"{url}/classify", json={"texts": texts}, timeout=120)
            return r.status_code, r.headers.get("retry-after"), r.text[:200]

        with cf.ThreadPoolExecutor(args.clients) as pool:
            answers = list(pool.map(one, range(args.requests)))
    finally:
        server.terminate()
        server.wait(30)
    text = log_path.read_text()
    result = {"max_latency_ms": args.max_latency_ms, "clients": args.clients, "requests": args.requests,
              "answers": {f"{s} retry-after={ra}": n for (s, ra), n in sorted(Counter((s, ra) for s, ra, _ in
                                                                                     answers).items())},
              "refusal_bodies": sorted({b for s, _, b in answers if s != 200}),
              "log_lines_overloaded": text.count("Overloaded /classify"), "log_tracebacks": text.count("Traceback")}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
