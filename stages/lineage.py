"""Lineage audit of a packaged model: which data, code, params and checks made it.

    python -m stages.lineage dist/lm-pipeline-<version>.bento          # an exported Bento, read in place
    python -m stages.lineage lm-pipeline:latest --verify               # a Bento in the store, checked here
    python -m stages.lineage ~/bentoml/models/lm-pipeline-classifier/<version> --json

Prints the chain from the raw sources (with their checksums) through cleaning, tokenizer, token datasets,
pre-training, DAPT, fine-tuning, every gate and the evaluation to the Bento. The record travels inside the
Bento (``lineage.json`` in the classifier model), so this works wherever the Bento was imported.

``--verify`` recomputes hashes: the record's own consistency and the packaged models' files against it
(anywhere), and, where there is a workspace (``--workspace``, default: the nearest folder at or above the
current one holding a ``dvc.lock``), every upstream
stage's ``dvc.lock`` entry and every file they read or wrote. Each mismatch is printed with the file it
concerns; the exit status is 1 when there is any (2 when the target cannot be read).

What the record cannot vouch for: itself and the Bento's other files (``bento.yaml``, ``bento_config.json``,
requirements, ``model.yaml``). Someone who can rewrite the Bento can rewrite a weight file and
``lineage.json`` together, and without a workspace the two agree. ``--pin SHA256`` closes that: the
exported archive's digest, taken from where the publisher cannot rewrite it along with the Bento (the
package stage writes it to ``reports/metrics/package.json``, kept in git; a registry's own record), binds
every byte. Without a pin, ``--verify`` lists the files it could not bind. Byte-code under ``src/`` is
always a mismatch: packaging ships none.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path


def find_workspace(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` holding a ``dvc.lock`` (as git finds its repository)."""
    for folder in (start, *start.parents):
        if (folder / "dvc.lock").is_file():
            return folder
    return None


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stages.lineage", description=__doc__.split("\n\n")[0])
    ap.add_argument("target", help="an exported .bento file, a Bento or model tag, a Bento or model folder")
    ap.add_argument("--verify", action="store_true", help="recompute hashes; exit 1 on any mismatch")
    ap.add_argument("--workspace", type=Path, help="the project folder to verify against (default: the nearest "
                                                   "folder at or above the current one holding dvc.lock)")
    ap.add_argument("--pin", metavar="SHA256", help="with --verify and an exported .bento: the archive's SHA-256 "
                                                    "from a place its publisher cannot rewrite (binds every file)")
    ap.add_argument("--json", action="store_true", help="print the record (and the verdict) as JSON")
    args = ap.parse_args(list(argv) if argv is not None else None)
    from stages.provenance.chain import render
    from stages.provenance.record import LineageError
    from stages.provenance.targets import open_target
    from stages.provenance.verify import verify

    try:
        target = open_target(args.target)
    except LineageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    verdict, workspace = None, None
    if args.pin and not (args.verify and target.bento.get("sha256")):
        print(f"error: --pin checks an exported .bento file with --verify; {args.target} is "
              f"{'not one' if args.verify else 'given without --verify'}", file=sys.stderr)
        return 2
    if args.verify:
        workspace = args.workspace or find_workspace(Path.cwd())
        if args.workspace is not None and not (workspace / "dvc.lock").is_file():
            print(f"error: {workspace}: no dvc.lock in this workspace", file=sys.stderr)
            return 2
        verdict = verify(target.record, packaged=target.packaged, workspace=workspace, src=target.src,
                         all_files=target.all_files, bento=target.bento, pin=args.pin)
        verdict.notes.insert(0, f"workspace: {workspace.resolve()}" if workspace else
                             "workspace: none (no dvc.lock here or above; only the packaged files and the record's "
                             "own consistency were checked)")
    if args.json:
        out = {"bento": target.bento, "record": target.record}
        if verdict is not None:
            out["verify"] = verdict.as_dict()
        json.dump(out, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print(render(target.record, target.bento))
        if verdict is not None:
            print()
            for note in verdict.notes:
                print(f"note: {note}")
            if verdict.ok:
                scope = "" if workspace is not None else ", packaged files only"
                print(f"verify: OK ({verdict.checked} checks{scope})")
            else:
                print(f"verify: {len(verdict.mismatches)} mismatch(es) in {verdict.checked} checks")
                for m in verdict.mismatches:
                    print(f"  MISMATCH {m}")
    return 0 if verdict is None or verdict.ok else 1


if __name__ == "__main__":
    from stages.common.cli import entry

    sys.exit(entry(main))
