"""Lineage audit of a packaged model: which data, code, params and checks made it.

    python -m stages.lineage dist/lm-pipeline-<version>.bento          # an exported Bento, read in place
    python -m stages.lineage lm-pipeline:latest --verify               # a Bento in the store, checked here
    python -m stages.lineage ~/bentoml/models/lm-pipeline-classifier/<version> --json
    python -m stages.lineage data/models/dapt/bert --card                # any model folder of this workspace

Prints the chain from the raw sources to the Bento from its ``lineage.json`` (or ``--card``: the model card);
``--verify`` recomputes every hash and exits 1 on a mismatch, 2 when the target cannot be read. Only ``--pin`` or
``--public-key`` bind a Bento to its origin (docs/auditing.md has the threat model).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from stages.provenance import stagecard
from stages.provenance.card import classifier_card, generative_card
from stages.provenance.chain import render
from stages.provenance.legacy import is_ed25519
from stages.provenance.manifest import load_key
from stages.provenance.record import LineageError, find_workspace
from stages.provenance.signing import PUBLIC_KEY_SUFFIX, sidecar
from stages.provenance.targets import is_classifier, model_dirs, open_target
from stages.provenance.verify import Audit, Standard, Verdict, verify


def verdict_line(verdict, with_workspace: bool) -> list[str]:
    """The result first: OK (bound or not) or the mismatches, each named."""
    scope = "" if with_workspace else ", packaged files only"
    if not verdict.ok:
        return [f"verify: {len(verdict.mismatches)} mismatch(es) in {verdict.checked} checks",
                *[f"  MISMATCH {m}" for m in verdict.mismatches]]
    if verdict.pinned or verdict.unverified is None:
        bound = "; every file of the Bento bound" if verdict.pinned else ""
        return [f"verify: OK ({verdict.checked} checks{scope}{bound})"]
    return [f"verify: OK, UNPINNED ({verdict.checked} checks{scope}): the Bento agrees with itself; this proves "
            "consistency, not origin (someone who can rewrite the Bento can rewrite all it holds together). Exit "
            "status 0, as documented for an audit without --pin or --public-key; pin the manifest_sha256 of "
            "reports/metrics/package.json to prove origin"]


def report(verdict, with_workspace: bool, details: bool = False) -> str:
    """The verdict as text, the result first: then the workspace, what binds the Bento, and either every check,
    note and file nothing binds (``details``) or their counts."""
    lines = verdict_line(verdict, with_workspace)
    lines += [f"note: {note}" for note in verdict.notes if note.startswith("workspace:")]
    lines += [f"bound: {how}" for how in verdict.bound_by]
    if not details:
        unbound = len(verdict.unverified or ())
        lines.append(f"details: {len(verdict.verified)} checks passed, {len(verdict.notes) - 1} notes"
                     + (f", {unbound} file(s) of the Bento that nothing outside it binds (UNVERIFIED)" if unbound
                        else "") + "; --details lists them")
        return "\n".join(lines)
    lines += [f"checked: {what}" for what in verdict.verified]
    lines += [f"note: {note}" for note in verdict.notes if not note.startswith("workspace:")]
    if verdict.unverified:
        lines.append(f"unverified: {len(verdict.unverified)} file(s) of the Bento that neither the lineage record "
                     "covers nor a pinned or signed manifest binds (each agrees with the Bento's own manifest where "
                     "it has one, which vouches only for itself):")
        lines += [f"  UNVERIFIED {rel}" for rel in verdict.unverified]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m stages.lineage", description=__doc__.split("\n\n")[0])
    ap.add_argument("target", help="an exported .bento file, a Bento or model tag, a Bento or model folder")
    ap.add_argument("--verify", action="store_true", help="recompute hashes; exit 1 on any mismatch")
    ap.add_argument("--workspace", type=Path, help="the project folder to verify against (default: the model "
                    "folder's own, else the nearest folder at or above the current one holding dvc.lock)")
    ap.add_argument("--pin", metavar="SHA256", help="with --verify and a Bento: the SHA-256 of its manifest "
                    "(package.json manifest_sha256) or of the exported archive, from where its publisher cannot "
                    "rewrite it; binds every file")
    ap.add_argument("--public-key", metavar="PEM", type=Path,
                    help="with --verify and a Bento: the public half of the key that signed it at packaging (the "
                         "<bento>.pub.pem exported beside it, taken from a place its publisher cannot rewrite): checks "
                         "each model's OpenSSF signature and the signed SLSA provenance, and binds every file (an "
                         "ed25519 key checks the manifest signature of Bentos packaged before those)")
    ap.add_argument("--strict", action="store_true",
                    help="with --verify: exit 1 unless every file of a Bento is bound by --pin or --public-key and "
                         "the Bento carries signed standard provenance (an audit that must prove origin)")
    ap.add_argument("--details", action="store_true", help="with --verify: every check, note and unbound file after "
                    "the verdict (without it: their counts)")
    ap.add_argument("--json", action="store_true", help="print the record (and the verdict) as JSON")
    ap.add_argument("--card", action="store_true", help="print the model card rendered from the record (for a "
                    "pre-trained or DAPT folder of a workspace, that model's)")
    return ap


def _open(args: argparse.Namespace) -> tuple:
    """The target, the auditor's public key, the standard checks' inputs and the workspace to verify against;
    a bad combination of flags is a LineageError."""
    target = open_target(args.target)
    binding = [flag for flag, value in (("--pin", args.pin), ("--public-key", args.public_key)) if value]
    if binding and not (args.verify and target.files is not None):
        raise LineageError(f"{' and '.join(binding)} check a Bento (an exported .bento, a Bento folder or a Bento "
                           f"tag) with --verify; {args.target} is "
                           f"{'not one' if args.verify else 'given without --verify'}")
    public_key = load_key(args.public_key) if args.public_key is not None else None
    standard = None
    if target.files is not None:  # the standard checks take an EC key: the auditor's, else the one beside
        key_path, ec_key = args.public_key, public_key  # an archive (which checks, but binds nothing)
        if key_path is None and target.bento.get("file"):
            beside = Path(sidecar(target.bento["file"], PUBLIC_KEY_SUFFIX))
            key_path, ec_key = (beside, load_key(beside)) if beside.is_file() else (None, None)
        if ec_key is not None and is_ed25519(ec_key):
            key_path, ec_key = None, None
        standard = Standard(provenance=target.provenance, model_dirs=lambda: model_dirs(target),
                            key_path=key_path, key=ec_key, explicit=args.public_key is not None)
    workspace = (args.workspace or target.workspace or find_workspace(Path.cwd())) if args.verify else None
    if args.verify and args.workspace is not None and not (workspace / "dvc.lock").is_file():
        raise LineageError(f"{workspace}: no dvc.lock in this workspace")
    return target, public_key, standard, workspace


def _verify(args: argparse.Namespace, target, public_key, standard, workspace: Path | None) -> Verdict:
    """Every check of ``--verify``, the folder's own card included."""
    legacy_key = public_key if public_key is not None and is_ed25519(public_key) else None
    verdict = verify(target, workspace=workspace,
                     audit=Audit(pin=args.pin, standard=standard, legacy_key=legacy_key, strict=args.strict))
    verdict.notes.insert(0, f"workspace: {workspace.resolve()}" if workspace else
                         "workspace: none (no dvc.lock here or above; only the Bento's own files and the record's "
                         "own consistency were checked, not the data and code upstream)")
    if target.folder and target.workspace is not None:  # the card its stage wrote into the folder
        problems, verified = stagecard.check(target.workspace / target.folder, target.record.get("sources"))
        verdict.checked += 1 + len((stagecard.read_facts(target.workspace / target.folder) or {}).get("corpora")
                                   or {})
        verdict.mismatches += problems
        verdict.verified += [v for v in verified if not v.endswith("no folder card to check")]
        verdict.notes += [v for v in verified if v.endswith("no folder card to check")]
    return verdict


def _print(args: argparse.Namespace, target, verdict: Verdict | None, workspace: Path | None) -> None:
    """The record (as JSON, a model card or text), with the verdict first when there is one."""
    if args.json and not args.card:
        out = {"bento": target.bento, "record": target.record}
        if verdict is not None:
            out["verify"] = verdict.as_dict()
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        by = "`python -m stages.lineage --card`"
        if args.card and target.stage and not is_classifier(target.stage):
            print(generative_card(target.record, target.folder, by=by), end="")
        elif args.card:
            print(classifier_card(target.record, by=by), end="")
        else:
            if verdict is not None:  # the verdict first, then the chain it checked
                print(report(verdict, workspace is not None, details=args.details) + "\n")
            if target.folder:
                print(f"Workspace model folder {target.folder} (written by {target.stage}); the record of the "
                      f"classifier {target.record['model']['name']}" + ("" if is_classifier(target.stage)
                                                                       else ", which it is upstream of") + ":")
            print(render(target.record, target.bento))
        if verdict is not None and args.card:
            print("\n" + report(verdict, workspace is not None, details=args.details))


def main(argv: Iterable[str] | None = None) -> int:
    """Print (and with ``--verify`` check) what made a packaged model; exit 1 on a mismatch, 2 on a bad target."""
    args = _parser().parse_args(list(argv) if argv is not None else None)
    try:
        target, public_key, standard, workspace = _open(args)
    except LineageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    verdict = _verify(args, target, public_key, standard, workspace) if args.verify else None
    _print(args, target, verdict, workspace)
    if verdict is not None and verdict.ok and args.strict and not verdict.pinned and verdict.unverified is not None:
        print("error: --strict: the Bento agrees with itself but nothing outside it binds it; give --pin SHA256 "
              "(package.json manifest_sha256) or --public-key PEM", file=sys.stderr)
        return 1
    return 0 if verdict is None or verdict.ok else 1


if __name__ == "__main__":
    from stages.common.cli import entry

    sys.exit(entry(main))
