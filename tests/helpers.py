"""Test data made in code, shared by the unit and integration tests."""

from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
from pathlib import Path

ADJ = ["quiet", "busy", "old", "bright", "small", "large", "careful", "famous", "local", "modern"]
NOUN = ["teacher", "farmer", "river", "library", "committee", "garden", "market", "doctor", "village", "engineer"]
VERB = ["visited", "described", "repaired", "painted", "studied", "opened", "followed", "measured", "moved", "praised"]
PLACE = ["station", "harbour", "museum", "school", "bridge", "castle", "factory", "hospital", "theatre", "forest"]


def english_page(seed: int, sentences: int = 6, per_line: int = 2) -> str:
    """A page of plain, unique English sentences (per seed), ``per_line`` sentences on each line."""
    rng = random.Random(seed)
    out = []
    for i in range(sentences):
        out.append(f"The {rng.choice(ADJ)} {rng.choice(NOUN)} {rng.choice(VERB)} the {rng.choice(NOUN)} "
                   f"near the {rng.choice(PLACE)} on day {seed * 100 + i} of the year.")
    return "\n".join(" ".join(out[i:i + per_line]) for i in range(0, len(out), per_line))


def seed_npm_cache(cache_dir: Path, spec: str, files: dict[str, bytes]) -> None:
    """Put a made-up npm tarball for ``spec`` into the project's npm cache, so no network is used."""
    name, version = spec.rsplit("@", 1)
    npm = cache_dir / "npm"
    npm.mkdir(parents=True, exist_ok=True)
    fname = f"{name.strip('@').replace('/', '-')}-{version}.tgz"
    with tarfile.open(npm / fname, "w:gz") as tar:
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    digest = hashlib.sha256((npm / fname).read_bytes()).hexdigest()
    index_path = npm / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    index[spec] = {"filename": fname, "name": name, "version": version, "integrity": None, "sha256": digest}
    index_path.write_text(json.dumps(index))


def seed_badwords(cache_dir: Path, words=("ass", "2 girls 1 cup")) -> None:
    """Seed the bad-words list once per cache (a re-seeded tarball would get new bytes and a new hash)."""
    index = cache_dir / "npm" / "index.json"
    if index.exists() and "naughty-words@1.0.2" in json.loads(index.read_text()):
        return
    seed_npm_cache(cache_dir, "naughty-words@1.0.2", {"package/en.json": json.dumps(list(words)).encode()})


def build_line_table(pair_files: list[Path], folder: Path, buckets: int) -> tuple[Path, int]:
    """The clean stage's line-dedup table of ``pair_files`` (saved by ``write_shard_pairs``), built in this
    process in ``folder``: its path and distinct lines."""
    import numpy as np

    from stages.cleaning.dedup import bucket_bounds, line_table
    from stages.cleaning.scratch import Scratch

    bounds = [bucket_bounds(np.load(f, mmap_mode="r")[0], buckets) for f in pair_files]
    (table,), distinct = line_table(Scratch(str(folder)), [str(f) for f in pair_files], bounds, buckets)
    return folder / table, distinct
