"""Package stage (``package``): the model the quality gate passed, with its lineage, as a versioned Bento.

    python -m stages.package --params params.yaml --gate reports/quality/model-gate.json \
        --finetuned data/models/finetune --pretrained data/models/pretrain --dapt data/models/dapt \
        --service infra/service.py --metrics reports/metrics/package.json

Refuses unless the model gate passed; the core is ``stages.serving.package`` (models in ``$BENTOML_HOME``, each
signed with OpenSSF Model Signing, a Bento sealed with a manifest and a signed SLSA provenance, exported to
``package.registry`` with the key's public half beside it; the key: ``stages.provenance.signing``). The metrics
record the manifest's and the archive's SHA-256 for ``python -m stages.lineage BENTO --verify --pin``; a registry
URL's user-info is never written or logged. ``--exported`` writes the same digests to a file git does not track
(``data/package/exported.json`` in dvc.yaml, in DVC's cache): the Bento lives in the store and registry, so a fresh
clone, whose committed outputs all match ``dvc.lock``, still runs this stage; ``dvc pull`` of the run brings it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from stages.common.cli import Stage, entry
from stages.provenance.record import LineageError
from stages.common.redact import redact_text
from stages.config import ConfigError
from stages.serving.config import load_config
from stages.serving.package import PackageRefused, package


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--gate", type=Path, default=Path("reports/quality/model-gate.json"))
    ap.add_argument("--finetuned", type=Path, default=Path("data/models/finetune"))
    ap.add_argument("--pretrained", type=Path, default=Path("data/models/pretrain"))
    ap.add_argument("--dapt", type=Path, default=Path("data/models/dapt"))
    ap.add_argument("--service", type=Path, default=Path("infra/service.py"))
    ap.add_argument("--metrics", type=Path, help="what was packaged (JSON)")
    ap.add_argument("--exported", type=Path,
                    help="this machine's record of the Bento it holds (JSON; untracked by git, so a fresh clone "
                         "packages again even where every other output matches dvc.lock)")
    ap.add_argument("--root", type=Path, default=Path("."), help="the workspace holding dvc.lock")


def _run(args: argparse.Namespace, log) -> dict:
    os.environ.setdefault("BENTOML_DO_NOT_TRACK", "True")
    cfg = load_config(args.params)
    try:
        result = package(cfg, root=args.root, gate_path=args.gate, finetuned=args.finetuned,
                         pretrained=args.pretrained, dapt=args.dapt, service=args.service, log=log)
    except (ConfigError, PackageRefused, LineageError, OSError):
        raise
    except Exception as exc:  # an exporter's error may quote the registry URL, credentials and all
        if redact_text(str(exc)) != str(exc):
            raise RuntimeError(f"{type(exc).__name__}: {redact_text(str(exc))}") from None
        raise
    return {args.metrics: result, args.exported: exported_record(result)}


def exported_record(result: dict) -> dict:
    """What this machine's store and registry hold: the Bento, its archive and that archive's digest."""
    return {k: result[k] for k in ("bento", "exported", "bytes", "sha256", "manifest_sha256", "beside")}


STAGE = Stage("stages.package", "Package the gated model as a Bento.", _arguments, _run,
              inputs=("params", "gate", "finetuned", "pretrained", "dapt", "service"), outputs=("metrics", "exported"),
              errors=(ConfigError, PackageRefused, LineageError, OSError),
              message=lambda exc: redact_text(str(exc)))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))
