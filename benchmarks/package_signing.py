"""What signing costs the package stage: its wall time on a finished workspace with ``package.signing: key`` and
``none``, and optionally with another checkout's code (the stage before signing existed), each into an empty
BentoML store and registry, so the workspace's own store, registry and metrics are untouched.

    python benchmarks/package_signing.py --workspace . [--before /path/to/older/checkout] [--repeats 3] \
        --out benchmarks/results/package_signing.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml


def run_stage(code: Path, workspace: Path, signing: str | None, scratch: Path) -> dict:
    """One package run with ``code``'s stages on ``workspace``; returns its wall seconds and what it made."""
    store, registry, config = scratch / "store", scratch / "dist", scratch / "config"
    for p in (store, registry):
        shutil.rmtree(p, ignore_errors=True)
    params = yaml.safe_load((workspace / "params.yaml").read_text())
    params["package"]["registry"] = str(registry)
    if signing is None:
        params["package"].pop("signing", None)
    else:
        params["package"]["signing"] = signing
    (scratch / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "BENTOML_HOME": str(store), "BENTOML_DO_NOT_TRACK": "True", "PYTHONPATH": str(code),
           "XDG_CONFIG_HOME": str(config)}
    env.pop("LMPIPE_SIGNING_KEY", None)
    cmd = [sys.executable, "-m", "stages.package", "--params", str(scratch / "params.yaml"), "--root",
           str(workspace), "--service", str(code / "infra/service.py"), "--metrics", str(scratch / "package.json")]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True)  # `-m` puts cwd first on sys.path
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"package run failed ({code}, signing {signing}):\n{proc.stderr[-3000:]}")
    made = json.loads((scratch / "package.json").read_text())
    return {"seconds": round(seconds, 2), "bytes": made["bytes"], "manifest_files": made["manifest_files"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workspace", type=Path, default=Path("."))
    ap.add_argument("--before", type=Path, help="a checkout of the code to compare against (its stages/ and infra/)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    here = Path(__file__).resolve().parents[1]
    workspace = args.workspace.resolve()
    variants = [("signed (key)", here, "key"), ("unsigned (none)", here, "none")]
    if args.before:
        variants.insert(0, ("before", args.before.resolve(), None))
    results: dict[str, list[dict]] = {name: [] for name, _, _ in variants}
    with tempfile.TemporaryDirectory(prefix="package-signing-") as tmp:
        run_stage(here, workspace, "key", Path(tmp))  # warm the page cache and create the key once
        for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits every variant alike
            for name, code, signing in variants:
                results[name].append(run_stage(code, workspace, signing, Path(tmp)))
    summary = {name: {"median_s": sorted(r["seconds"] for r in runs)[len(runs) // 2],
                      "runs_s": [r["seconds"] for r in runs], "bytes": runs[-1]["bytes"],
                      "manifest_files": runs[-1]["manifest_files"]} for name, runs in results.items()}
    out = {"workspace": str(workspace), "python": platform.python_version(), "cpus": os.cpu_count(),
           "repeats": args.repeats, "results": summary}
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
