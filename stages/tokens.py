"""Token-dataset stage: tokenize the cleaned corpora with one paradigm's tokenizer and pack them into blocks.

Under DVC (``tokens@bert``, ``tokens@gpt``, ``tokens@t5``):

    python -m stages.tokens --paradigm gpt --params params.yaml --tokenizer data/tokenizers/gpt \
        --corpus general=data/cleaned/general/documents.parquet --corpus domain=data/cleaned/domain/documents.parquet \
        --output data/tokens/gpt --report reports/quality/tokens-gpt.json --metrics reports/metrics/tokens-gpt.json

The output folder holds ``<corpus>/train.npy`` and ``<corpus>/heldout.npy`` (2-D block arrays, memory-mapped
by training with ``np.load(path, mmap_mode="r")``) and ``manifest.json`` (layout and special ids, tokenizer and
input hashes, counts). The split is the tokenizer stage's (``split`` in params.yaml). Encoding is batched and
runs on every core (``tokenizers`` parallelises each batch); packing a batch overlaps with encoding the next.
With ``LMPIPE_DASK`` set (``stages.common.shards``) the batches are encoded on a Dask cluster instead, as
Prefect tasks, and packed here in input order: the same bytes either way.
The core writes into a temporary sibling of the folder and returns its gate (``stages.quality.tokens_suite``);
the stage's entry publishes the folder only after the gate passed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stages.common.atomic import write_json_atomic
from stages.common.cli import Stage, entry, named_path
from stages.common.shards import open_shards
from stages.config import ConfigError, build, check, deep_merge, load_params, section
from stages.quality.gate import Gate, GateFailed
from stages.quality.tokens_suite import TokensGateConfig
from stages.sources.base import sha256_file
from stages.tokenization.corpus import SPLITS, split_batches
from stages.tokenization.split import SplitConfig
from stages.tokenization.trainers import PARADIGMS


@dataclass(frozen=True, kw_only=True)
class TokensConfig:
    """One paradigm's token datasets: the general and domain corpora encoded and packed into fixed-length blocks."""

    seq_len: int = 128
    """Tokens per example the model sees (T5: the encoder input; its stored raw block is longer), >= 8."""
    noise_density: float = 0.15
    """T5 span corruption: share of tokens corrupted, in (0, 1); sets the raw block length. Ignored otherwise."""
    mean_span: float = 3.0
    """T5 span corruption: mean corrupted span length in tokens, >= 1. Ignored otherwise."""
    batch_docs: int = 1000
    """Documents encoded per batch."""
    gate: TokensGateConfig = field(default_factory=TokensGateConfig)
    """The token datasets' quality gate."""

    def __post_init__(self) -> None:
        check(self.seq_len >= 8, "seq_len: must be >= 8")
        check(0 < self.noise_density < 1, "noise_density: must be in (0, 1)")
        check(self.mean_span >= 1, "mean_span: must be >= 1")
        check(self.batch_docs >= 1, "batch_docs: must be >= 1")


def load_config(params_path: Path, paradigm: str) -> tuple[TokensConfig, SplitConfig]:
    params = load_params(params_path)
    merged = deep_merge(section(params, "tokens.defaults"), section(params, f"tokens.{paradigm}") or {})
    return build(TokensConfig, merged, f"tokens.{paradigm}"), build(SplitConfig, section(params, "split"), "split")


def make_packer(layout, tok):
    from stages.tokenization import packing
    from stages.tokenization.blockfile import dtype_for
    from stages.tokenization.layout import sentence_end_ids

    dtype = dtype_for(layout.vocab_size)
    if layout.paradigm == "bert":
        return packing.SentencePacker(seq_len=layout.seq_len, cls_id=layout.cls_id, sep_id=layout.sep_id,
                                      pad_id=layout.pad_id, sentence_end_ids=sentence_end_ids(tok), dtype=dtype)
    if layout.paradigm == "gpt":
        return packing.CausalPacker(seq_len=layout.seq_len, eot_id=layout.eos_id, dtype=dtype)
    return packing.SpanPacker(raw_len=layout.block_len, eos_id=layout.eos_id, dtype=dtype)


def _encode(tok, parts: dict[str, list[str]]) -> tuple[dict[str, list[list[int]]], int]:
    return ({s: [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)] if texts else []
             for s, texts in parts.items()}, sum(len(t) for texts in parts.values() for t in texts))


def encoded(tok, batches: Iterable[dict[str, list[str]]]) -> Iterator[tuple[dict[str, list[list[int]]], int]]:
    """Token ids per split for each batch, encoded one batch ahead in a thread (``tokenizers`` releases the
    GIL and uses every core), so reading and packing overlap with encoding. Also yields the batch's chars."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode") as pool:
        pending = None
        for parts in batches:
            nxt = pool.submit(_encode, tok, parts)
            if pending is not None:
                yield pending.result()
            pending = nxt
        if pending is not None:
            yield pending.result()


_WORKER_TOKENIZERS: dict[str, object] = {}


def encode_shard(tokenizer_json: str, parts: dict[str, list[str]]):
    """The shard function of a distributed run: one batch's ids on a Dask worker. The tokenizer travels as
    its JSON (no shared filesystem needed) and is built once per worker process."""
    tok = _WORKER_TOKENIZERS.get(tokenizer_json)
    if tok is None:
        from stages.tokenization.layout import tokenizer_from_json

        tok = _WORKER_TOKENIZERS[tokenizer_json] = tokenizer_from_json(tokenizer_json)
    return _encode(tok, parts)


def tokenize_corpus(path: Path, layout, tok, split: SplitConfig, out_dir: Path, *,
                    batch_docs: int, shards=None) -> tuple[dict, int]:
    """Write ``out_dir/{train,heldout}.npy`` for one corpus; returns its counts and the tokens per second.
    With ``shards`` (a Dask ``stages.common.shards.Shards``) the batches are encoded there; packing stays
    here, in input order, so the blocks are the same bytes."""
    from stages.tokenization.blockfile import BlockWriter, dtype_for

    out_dir.mkdir(parents=True, exist_ok=True)
    packers = {s: make_packer(layout, tok) for s in SPLITS}
    writers = {s: BlockWriter(out_dir / f"{s}.npy", width=layout.block_len, dtype=dtype_for(layout.vocab_size))
               for s in SPLITS}
    counts = {s: {"documents": 0, "tokens": 0} for s in SPLITS}
    chars = 0
    start = time.perf_counter()

    def consume(result) -> None:
        nonlocal chars
        ids, n = result
        chars += n
        for s in SPLITS:
            counts[s]["documents"] += len(ids[s])
            counts[s]["tokens"] += sum(map(len, ids[s]))
            if ids[s]:
                out = packers[s].pack(ids[s])
                if len(out):
                    writers[s].write(out)

    # One pass over the corpus feeds both splits' packers, batch by batch in input order.
    batches = split_batches(path, split, batch_docs=batch_docs)
    if shards is None:
        for result in encoded(tok, batches):
            consume(result)
    else:
        text = tok.to_str()
        shards.map(encode_shard, ((text, parts) for parts in batches), consume, desc=f"tokens {out_dir.name}")
    for s in SPLITS:
        tail = packers[s].flush()
        if len(tail):
            writers[s].write(tail)
    seconds = time.perf_counter() - start
    # Counts only: timings would make identical runs differ (and dvc.lock with them). The log and
    # benchmarks/tokenize_throughput.py carry the speed.
    result = {"input": {"path": str(path), "sha256": sha256_file(path), "mchars": round(chars / 1e6, 3)}}
    total = 0
    for s in SPLITS:
        writers[s].close()
        total += counts[s]["tokens"]
        result[s] = {"file": f"{out_dir.name}/{s}.npy", "blocks": writers[s].rows, **counts[s],
                     "dropped_tokens": packers[s].dropped_tokens}
    return result, (int(total / seconds) if seconds else 0)


def make_token_datasets(cfg: TokensConfig, split: SplitConfig, *, paradigm: str, tokenizer_dir: Path,
                        corpora: dict[str, Path], out: Path, log=print) -> tuple[dict, Gate]:
    """Tokenize and pack every corpus into the folder ``out``; returns the metrics and the blocks' gate."""
    import numpy as np

    from stages.quality.tokens_suite import paths_of, tokens_suite
    from stages.tokenization.blockfile import dtype_for
    from stages.tokenization.layout import load_layout

    if not corpora:
        raise ValueError("no corpus given (--corpus NAME=PATH)")
    layout, tok = load_layout(tokenizer_dir, paradigm, seq_len=cfg.seq_len, noise_density=cfg.noise_density,
                              mean_span=cfg.mean_span)
    results = {}
    # One machine: the Rust tokenizer's own threads already use every core, so there is no local pool
    # (workers=1); a Dask engine when LMPIPE_DASK is set.
    with open_shards(1, name=f"tokens@{paradigm}") as engine:
        shards = engine if engine.engine == "dask" else None
        for name, path in corpora.items():
            results[name], speed = tokenize_corpus(path, layout, tok, split, out / name, batch_docs=cfg.batch_docs,
                                                   shards=shards)
            r = results[name]
            log(f"[tokens] {paradigm} {name}: " + ", ".join(
                f"{s} {r[s]['documents']} docs -> {r[s]['blocks']} blocks of {layout.block_len}" for s in SPLITS)
                + f"; {speed:,} tokens/s")
    files = {k: np.load(p, mmap_mode="r") for k, p in paths_of(out, list(corpora)).items()}
    tables, checks = tokens_suite(files, layout, cfg.gate)
    for key, table in tables.items():
        corpus, _, s = key.rpartition("_")
        if corpus in results and s in SPLITS and len(table):
            results[corpus][s]["pad_fraction"] = round(float(table["pad_fraction"].mean()), 4)
            results[corpus][s]["unk_fraction"] = round(float(table["unk_fraction"].mean()), 6)
    del files
    manifest = {"paradigm": paradigm, "layout": layout.to_json(), "dtype": np.dtype(dtype_for(layout.vocab_size)).name,
                "tokenizer": {"path": str(tokenizer_dir), "sha256": sha256_file(Path(tokenizer_dir) / "tokenizer.json")},
                "split": asdict(split), "corpora": results}
    write_json_atomic(out / "manifest.json", manifest)
    # Metrics are the numbers; paths and hashes live in the manifest.
    numbers = {c: {"mchars": r["input"]["mchars"],
                   **{s: {k: v for k, v in r[s].items() if k != "file"} for s in SPLITS}} for c, r in results.items()}
    return ({"paradigm": paradigm, "seq_len": layout.seq_len, "block_len": layout.block_len,
             "targets_len": layout.targets_len, "corpora": numbers}, Gate(f"tokens-{paradigm}", tables, checks))


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--paradigm", choices=PARADIGMS, required=True)
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--tokenizer", type=Path, required=True, help="tokenizer folder from the tokenizer stage")
    ap.add_argument("--corpus", type=named_path, action="append", default=[],
                    help="NAME=PATH of a documents Parquet file (repeatable)")
    ap.add_argument("--output", type=Path, required=True, help="output folder (replaced atomically)")
    ap.add_argument("--report", type=Path, help="gate report JSON (default: OUTPUT.gate.json beside OUTPUT)")
    ap.add_argument("--metrics", type=Path, help="metrics JSON for DVC")


def _run(args: argparse.Namespace, log) -> dict:
    cfg, split = load_config(args.params, args.paradigm)
    report = args.report or args.output.parent / f"{args.output.name}.gate.json"
    metrics, gate = make_token_datasets(cfg, split, paradigm=args.paradigm, tokenizer_dir=args.tokenizer,
                                        corpora=dict(args.corpus), out=args.staged.path, log=log)
    return {report: gate, args.metrics: metrics}


STAGE = Stage("stages.tokens", "Tokenize and pack corpora into blocks.", _arguments, _run,
              inputs=("params", "tokenizer", "corpus"), folder="output", outputs=("report", "metrics"),
              errors=(ConfigError, GateFailed, FileNotFoundError, ValueError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))
