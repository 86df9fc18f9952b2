"""The tokens stage's core: encode the cleaned corpora with a paradigm's tokenizer (batched, or as Dask tasks) and
pack them into fixed-length block arrays with their manifest and quality gate."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from stages.common.atomic import write_json_atomic
from stages.common.shards import open_shards
from stages.quality.gate import Gate
from stages.quality.tokens_suite import paths_of, tokens_suite
from stages.sources.base import sha256_file
from stages.tokenization.packing import BlockWriter, CausalPacker, SentencePacker, dtype_for, open_blocks
from stages.tokenization.config import TokensConfig
from stages.tokenization.layout import load_layout, sentence_end_ids, tokenizer_from_json
from stages.tokenization.split import SPLITS, SplitConfig, split_batches


def make_packer(layout, tok):
    dtype = dtype_for(layout.vocab_size)
    if layout.paradigm == "bert":
        return SentencePacker(seq_len=layout.seq_len, cls_id=layout.cls_id, sep_id=layout.sep_id,
                              pad_id=layout.pad_id, sentence_end_ids=sentence_end_ids(tok), dtype=dtype)
    return CausalPacker(seq_len=layout.block_len, eot_id=layout.eos_id, dtype=dtype)  # T5: at its raw length


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


_worker_tokenizer = functools.cache(tokenizer_from_json)  # built once per Dask worker process


def encode_shard(tokenizer_json: str, parts: dict[str, list[str]]):
    """One batch's ids on a Dask worker; the tokenizer travels as its JSON (no shared filesystem needed)."""
    return _encode(_worker_tokenizer(tokenizer_json), parts)


def tokenize_corpus(path: Path, layout, tok, split: SplitConfig, out_dir: Path, *,
                    batch_docs: int, shards=None) -> tuple[dict, int]:
    """Write ``out_dir/{train,heldout}.npy`` for one corpus; returns its counts and the tokens per second. With
    ``shards`` (Dask) the batches are encoded there and packed here in input order: the same bytes."""
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
            writers[s].write(packers[s].pack(ids[s]))  # zero rows write nothing

    # One pass over the corpus feeds both splits' packers, batch by batch in input order.
    batches = split_batches(path, split, batch_docs=batch_docs)
    if shards is None:
        for result in encoded(tok, batches):
            consume(result)
    else:
        text = tok.to_str()
        shards.map(encode_shard, ((text, parts) for parts in batches), consume, desc=f"tokens {out_dir.name}")
    for s in SPLITS:
        writers[s].write(packers[s].flush())
    seconds = time.perf_counter() - start
    # counts only: timings would make identical runs differ (benchmarks/tokenize_throughput.py has the speed)
    result = {"input": {"path": str(path), "sha256": sha256_file(path), "mchars": round(chars / 1e6, 3)}}
    for s in SPLITS:
        writers[s].close()
        result[s] = {"file": f"{out_dir.name}/{s}.npy", "blocks": writers[s].rows, **counts[s],
                     "dropped_tokens": packers[s].dropped_tokens}
    return result, (int(sum(c["tokens"] for c in counts.values()) / seconds) if seconds else 0)


def make_token_datasets(cfg: TokensConfig, split: SplitConfig, *, paradigm: str, tokenizer_dir: Path,
                        corpora: dict[str, Path], out: Path, log=print) -> tuple[dict, Gate]:
    """Tokenize and pack every corpus into the folder ``out``; returns the metrics and the blocks' gate."""
    import numpy as np

    if not corpora:
        raise ValueError("no corpus given (--corpus NAME=PATH)")
    layout, tok = load_layout(tokenizer_dir, paradigm, seq_len=cfg.seq_len, noise_density=cfg.noise_density,
                              mean_span=cfg.mean_span)
    results = {}
    # no local pool: the Rust tokenizer's threads use every core; a Dask engine when LMPIPE_DASK is set
    with open_shards(1, name=f"tokens@{paradigm}") as engine:
        shards = engine if engine.engine == "dask" else None
        for name, path in corpora.items():
            results[name], speed = tokenize_corpus(path, layout, tok, split, out / name, batch_docs=cfg.batch_docs,
                                                   shards=shards)
            r = results[name]
            log(f"[tokens] {paradigm} {name}: " + ", ".join(
                f"{s} {r[s]['documents']} docs -> {r[s]['blocks']} blocks of {layout.block_len}" for s in SPLITS)
                + f"; {speed:,} tokens/s")
    files = {k: open_blocks(p) for k, p in paths_of(out, list(corpora)).items()}
    tables, checks = tokens_suite(files, layout, cfg.gate, where="tokens.defaults.gate")
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
    numbers = {c: {"mchars": r["input"]["mchars"],
                   **{s: {k: v for k, v in r[s].items() if k != "file"} for s in SPLITS}} for c, r in results.items()}
    return ({"paradigm": paradigm, "seq_len": layout.seq_len, "block_len": layout.block_len,
             "targets_len": layout.targets_len, "corpora": numbers}, Gate(f"tokens-{paradigm}", tables, checks))
