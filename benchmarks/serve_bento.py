"""Serving benchmark: the packaged classifier in-process vs the served Bento under concurrent load, with and
without BentoML's adaptive batching.

    .venv/bin/python benchmarks/serve_bento.py dist/lm-pipeline-<version>.bento \
        --texts data/ingested/task/documents.parquet --out benchmarks/results/serve_bento.json

The .bento is imported into a temporary BENTOML_HOME (the deployer's path). Each served run starts
`bentoml serve` on it, warms up, then runs ``--clients`` concurrent clients for ``--seconds``, each sending
one request of ``--texts-per-request`` test-split descriptions at a time and waiting for the answer (a closed
loop). In-process: the same classifier (``stages.serving.inference``) called one request at a time, and on
batches as large as the served batch limit. Clients and server share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def summary(latencies: list[float], seconds: float, texts_per_request: int) -> dict:
    if not latencies:
        return {"requests": 0, "requests_per_s": 0.0, "texts_per_s": 0.0}
    return {"requests": len(latencies), "requests_per_s": round(len(latencies) / seconds, 2),
            "texts_per_s": round(len(latencies) * texts_per_request / seconds, 1),
            "p50_ms": round(1000 * percentile(latencies, 0.5), 1), "p95_ms": round(1000 * percentile(latencies, 0.95), 1),
            "mean_ms": round(1000 * statistics.fmean(latencies), 1)}


def in_process(model_dir: Path, texts: list[str], per_request: int, seconds: float, batch: int,
               base: Path | None = None) -> dict:
    from stages.serving.inference import TextClassifier

    clf = TextClassifier(model_dir, device="cpu", batch_size=batch, base=base)  # base: a frozen or LoRA classifier's
    clf.classify(texts[:per_request])  # warm-up
    lat, i, start = [], 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        clf.classify(texts[i: i + per_request] or texts[:per_request])
        lat.append(time.perf_counter() - t)
        i = (i + per_request) % max(1, len(texts) - per_request)
    one = summary(lat, time.perf_counter() - start, per_request)
    lat, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        clf.classify(texts[:batch])
        lat.append(time.perf_counter() - t)
    batched = summary(lat, time.perf_counter() - start, batch)
    return {"one_request_at_a_time": one, f"batches_of_{batch}_texts": batched}


async def load(url: str, texts: list[str], clients: int, per_request: int, seconds: float) -> dict:
    import httpx

    lat: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def client(k: int, http: httpx.AsyncClient) -> None:
        nonlocal errors
        i = k * per_request
        while time.perf_counter() < stop:
            body = {"texts": texts[i % len(texts): i % len(texts) + per_request] or texts[:per_request]}
            t = time.perf_counter()
            r = await http.post(f"{url}/classify", json=body)
            if r.status_code == 200:
                lat.append(time.perf_counter() - t)
            else:
                errors += 1
            i += clients * per_request

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(k, http) for k in range(clients)))
        elapsed = time.perf_counter() - start
    out = summary(lat, elapsed, per_request)
    out["errors"] = errors
    return out


def wait_ready(url: str, tag: str) -> None:
    """Return once the server at ``url`` answers ``/readyz`` with 200; RuntimeError after 150 s."""
    import httpx

    for _ in range(300):
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"bentoml serve {tag} did not become ready in 150 s")


def served(bentoml_cli: str, tag: str, env: dict, texts: list[str], args, batching: bool) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**env, "LMPIPE_ADAPTIVE_BATCHING": "1" if batching else "0"}
    server = subprocess.Popen([bentoml_cli, "serve", tag, "--port", str(port), "--host", "127.0.0.1"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, tag)
        asyncio.run(load(url, texts, args.clients, args.texts_per_request, 3))  # warm-up
        return asyncio.run(load(url, texts, args.clients, args.texts_per_request, args.seconds))
    finally:
        server.terminate()
        server.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bento", type=Path, help="an exported .bento file")
    ap.add_argument("--texts", type=Path, default=Path("data/ingested/task/documents.parquet"))
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--texts-per-request", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    import pandas as pd

    df = pd.read_parquet(args.texts, columns=["text", "split"])
    texts = df[df["split"] == "test"]["text"].tolist()
    with tempfile.TemporaryDirectory(prefix="bench-bentoml-") as home:
        env = {**os.environ, "BENTOML_HOME": home, "BENTOML_DO_NOT_TRACK": "True"}
        bentoml_cli = str(Path(sys.executable).parent / "bentoml")
        subprocess.run([bentoml_cli, "import", str(args.bento.resolve())], env=env, check=True, capture_output=True)
        os.environ.update(BENTOML_HOME=home, BENTOML_DO_NOT_TRACK="True")
        import bentoml

        bento = bentoml.bentos.list()[0]
        config = json.loads((Path(bento.path) / "src" / "bento_config.json").read_text())
        model_dir = Path(bentoml.models.get(config["classifier"]).path)
        max_batch = config["batching"]["max_batch_size"]
        base = Path(bentoml.models.get(config["base"]).path) if config.get("base") else None
        result = {
            "bento": str(bento.tag), "model": json.loads((model_dir / "lineage.json").read_text())["model"]["name"],
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "clients": args.clients, "texts_per_request": args.texts_per_request, "seconds": args.seconds,
            "batching": config["batching"],
            "in_process": in_process(model_dir, texts, args.texts_per_request, args.seconds, max_batch, base),
            "served_adaptive_batching": served(bentoml_cli, str(bento.tag), env, texts, args, True),
            "served_no_batching": served(bentoml_cli, str(bento.tag), env, texts, args, False),
        }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
