"""Corpus-wide dedup as C4 does it: URL dedup keeps the newest page; line dedup keeps one deterministic
page per line (the smallest MD5 of its URL), drops repeats inside a page and re-checks sentences."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from stages.cleaning.base import Doc
from stages.cleaning.c4 import line_key
from stages.cleaning.dedup import LineDedupConfig, LineDedupFilter, line_pairs, url_dedup, write_shard_pairs
from tests.helpers import build_line_table


def _md5(s):
    return hashlib.md5(s.encode()).hexdigest()


def test_url_dedup_keeps_the_newest_page_and_exact_duplicates_once():
    rows = [(0, "a", "http://www.x.com/p/", "2020-01-01"), (1, "b", "https://x.com/p", "2021-01-01"),
            (2, "c", None, ""), (3, "c", None, ""), (4, "d", "http://y.com/q", "2020"),
            (5, "e", "http://y.com/q", "2020")]
    drop, n_url, n_exact = url_dedup(rows)
    assert drop == {0, 3, 5}  # older x.com page; the second copy of c; y.com tie -> the larger id loses
    assert (n_url, n_exact) == (2, 1)


def test_url_dedup_tfds_rule_keeps_the_largest_text_md5_whatever_the_order():
    texts = {"a": "first page", "b": "second page", "c": "third page"}
    rows = [(i, d, "http://x.com/p", "2020", _md5(t)) for i, (d, t) in enumerate(texts.items())]
    keep = max(rows, key=lambda r: r[4])[0]
    for order in (rows, rows[::-1]):
        drop, n_url, n_exact = url_dedup(order, "tfds")
        assert drop == {0, 1, 2} - {keep} and (n_url, n_exact) == (2, 0)
    with pytest.raises(ValueError, match="url_dedup_rule"):
        url_dedup(rows, "oldest")


def _dedup(pages, tmp_path, buckets=4):
    docs = [Doc(id=f"id{i}", text=t, source="", url=u, meta="{}") for i, (u, t) in enumerate(pages)]
    files = []
    for i, d in enumerate(docs):  # one shard per page: the result must not depend on sharding
        f = tmp_path / f"pairs-{i}.npy"
        write_shard_pairs([line_pairs(d)], f)
        files.append(f)
    table, _ = build_line_table(files, tmp_path, buckets)
    filt = LineDedupFilter(table, LineDedupConfig(buckets=buckets))
    out = []
    for d in docs:
        reason = filt.apply(d)
        out.append((d.url, reason, d.text if reason is None else None))
    return out, filt.stats


def test_duplicate_lines_across_pages_keep_one_deterministic_page(tmp_path):
    dup = "This is a duplicated line."
    urls = ["url/1", "url/2", "url/3"]
    winner = min(urls, key=_md5)  # C4: the page whose URL has the smallest MD5 keeps the line
    pages = [(u, f"{dup}\nPage {u} has its own first sentence.\nPage {u} has a second one here.\n"
                 f"Page {u} has a third.") for u in urls]
    out, stats = _dedup(pages, tmp_path)
    for url, reason, text in out:
        assert reason is None
        assert (dup in text) is (url == winner)
    assert stats.lines_dropped["global_duplicate"] == 2
    # order of pages does not matter
    (tmp_path / "r").mkdir()
    out2, _ = _dedup(list(reversed(pages)), tmp_path / "r")
    assert {u: t for u, _, t in out2} == {u: t for u, _, t in out}


def test_duplicates_within_a_page_and_case_and_spaces_are_one_line(tmp_path):
    text = "Same line here.\n  same LINE here.  \nAnother sentence follows.\nAnd one more at the end."
    out, stats = _dedup([("u", text)], tmp_path, buckets=1)
    assert out[0][2] == "Same line here.\nAnother sentence follows.\nAnd one more at the end."
    assert stats.lines_dropped["local_duplicate"] == 1


def test_page_with_too_few_sentences_after_dedup_is_dropped(tmp_path):
    shared = "First shared sentence is here.\nSecond shared sentence is here."
    urls = ["a", "b"]
    loser = max(urls, key=_md5)
    pages = [(u, shared + f"\nOnly page {u} has this line.") for u in urls]
    out, stats = _dedup(pages, tmp_path)
    reasons = {u: r for u, r, _ in out}
    assert reasons[loser] == "too_few_sentences" and reasons[min(urls, key=_md5)] is None


def test_selection_table_is_the_minimum_page_key_per_line(tmp_path):
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 2**63, size=(5000, 2), dtype=np.uint64)
    pairs[:, 0] %= 300  # many repeats
    pairs[:, 0] *= 2**55
    files = []
    for i, chunk in enumerate(np.array_split(pairs, 7)):
        f = tmp_path / f"p{i}.npy"
        write_shard_pairs([chunk], f)
        files.append(f)
    table = np.load(build_line_table(files, tmp_path, buckets=8)[0])
    expected = {}
    for h, k in pairs.tolist():
        expected[h] = min(k, expected.get(h, k))
    assert table[0].tolist() == sorted(expected)
    assert dict(zip(table[0].tolist(), table[1].tolist())) == expected


def test_line_key_normalises_case_and_surrounding_space():
    assert line_key("  Hello World. ") == line_key("hello world.")
    assert line_key("hello world.") != line_key("hello  world.")


def test_selection_build_keeps_few_files_open(tmp_path):
    """Thousands of shards must not exhaust file descriptors (shards are opened per bucket, one at a time)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import resource, numpy as np
        from pathlib import Path
        from stages.cleaning.dedup import write_shard_pairs
        from tests.helpers import build_line_table
        files = []
        for i in range(300):
            f = Path({str(tmp_path)!r}) / f"p{{i}}.npy"
            write_shard_pairs([np.array([[i * 7919 % 1000, i]], dtype=np.uint64)], f)
            files.append(f)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        print(build_line_table(files, Path({str(tmp_path)!r}), 4)[1])
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=".")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.strip()) == 300


@pytest.mark.parametrize("rule", ["newest", "tfds"])
def test_the_vectorised_url_dedup_makes_the_same_decisions(rule):
    import random

    import numpy as np

    from stages.cleaning.dedup import url_dedup_arrays, url_key

    rng = random.Random(7)
    for trial in range(30):
        n = rng.randint(1, 60)
        texts = [f"text {rng.randint(0, n // 2)}" for _ in range(n)]  # exact duplicates
        ids = [f"{abs(hash(t)) % 10**6:032d}" for t in texts]
        urls = [rng.choice([None, f"http://a.example/{rng.randint(0, 5)}", f"https://www.a.example/{rng.randint(0, 5)}/"])
                for _ in range(n)]
        stamps = [rng.choice(["", "2020", "2020-01", "2021"]) for _ in range(n)]
        md5 = [f"{rng.randint(0, 10**6):032d}" for _ in texts]
        md5 = [md5[texts.index(t)] for t in texts]  # the same text, the same MD5
        rows = [(i, ids[i], urls[i], stamps[i]) + ((md5[i],) if rule == "tfds" else ()) for i in range(n)]
        want = url_dedup(rows, rule)
        got = url_dedup_arrays(np.array(ids, dtype="S32"), np.array([url_key(u) if u else b"" for u in urls],
                                                                    dtype="S16"),
                               np.array(stamps), np.array(md5, dtype="S32"), rule)
        assert (set(got[0].tolist()), got[1], got[2]) == want, (trial, rows)
