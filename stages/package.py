"""Package stage (``package``): the model the quality gate passed, with its lineage, as a versioned Bento.

    python -m stages.package --params params.yaml --gate reports/quality/model-gate.json \
        --finetuned data/models/finetune --pretrained data/models/pretrain --dapt data/models/dapt \
        --service infra/service.py --metrics reports/metrics/package.json

1. Obeys ``reports/quality/model-gate.json``: when ``passed`` is false nothing is packaged and the stage
   fails with the gate's failed checks (the previous Bento, export and metrics stay as they were).
2. Collects the lineage record (``stages.provenance.record``), refusing a workspace that differs from
   ``dvc.lock``.
3. Saves the selected fine-tuned model (its folder byte for byte, its own ``README.md`` aside, plus
   ``lineage.json``) and, as ``package.generative`` chooses, the pre-trained models into the BentoML model store with
   ``bentoml.models.create``; labels and metadata carry the commit, the upstream stages' ``dvc.lock`` hashes,
   the params, the gates' results and the evaluation metrics. Each model folder gets a ``README.md`` model
   card rendered from the lineage record (``stages.provenance.card``), in place of the card its training
   stage wrote (``stages.provenance.stagecard``, which cannot know the gate's verdict).
4. Builds a Bento from ``infra/service.py`` with the ``stages`` package inside (the service imports its
   pre/post-processing from there), its README the Bento's card, its image declared (this interpreter's
   Python version, the distribution, system packages, pinned Python packages) and its resources in the
   service config (``package.resources``), and exports it to ``package.registry`` (a folder or any fsspec
   URL) as ``<name>-<version>.bento``. Before exporting, the Bento gets its manifest
   (``stages.provenance.manifest``: the SHA-256 of every file of the Bento, models included), signed with the
   operator's ed25519 key when ``LMPIPE_SIGNING_KEY`` names one (a PEM private key); the metrics record the
   manifest's SHA-256 (``manifest_sha256``), the signing key's fingerprint and the exported archive's SHA-256
   and size (read back through fsspec for a remote registry), so an auditor can pin them from git
   (``python -m stages.lineage BENTO --verify --pin ...``). A registry URL's user-info (``user:secret@``) is
   never written or logged.

The BentoML store is ``$BENTOML_HOME`` (default ``~/bentoml``).
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
    return {args.metrics: result}


STAGE = Stage("stages.package", "Package the gated model as a Bento.", _arguments, _run,
              inputs=("params", "gate", "finetuned", "pretrained", "dapt", "service"), outputs=("metrics",),
              errors=(ConfigError, PackageRefused, LineageError, OSError),
              message=lambda exc: redact_text(str(exc)))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))
