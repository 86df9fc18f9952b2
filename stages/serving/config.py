"""The package stage's settings (``package`` in params.yaml): the Bento's name and registry, and the service's
request limits, batching and resources."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from stages.config import build, check, load_params, section
from stages.tokenization.trainers import PARADIGMS


@dataclass(frozen=True, kw_only=True)
class LimitsConfig:
    """Request limits of the service; a request beyond them is rejected before it reaches a model."""

    max_texts: int = 64
    """Most texts in one `classify` request."""
    max_chars: int = 4000
    """Most characters of one text or prompt."""
    max_new_tokens: int = 64
    """Most tokens a `generate` or `text2text` request may ask for."""
    max_top_k: int = 20
    """Most candidates a `fill_mask` request may ask for."""
    timeout_s: int = 60
    """Seconds the server gives a request before it gives up."""

    def __post_init__(self) -> None:
        check(min(self.max_texts, self.max_chars, self.max_new_tokens, self.max_top_k, self.timeout_s) >= 1,
              "limits: every limit must be >= 1")


@dataclass(frozen=True, kw_only=True)
class BatchingConfig:
    """BentoML adaptive batching of `classify`: concurrent requests share one forward pass."""

    enabled: bool = True
    """Merge concurrent `classify` requests into batches."""
    max_batch_size: int = 64
    """Most texts in one merged batch (also the classifier's batch size)."""
    max_latency_ms: int = 10000
    """Bound on a request's wait plus compute, in ms; the batcher answers 503 to requests predicted to exceed it, so
    keep it well above a full batch's time."""

    def __post_init__(self) -> None:
        check(self.max_batch_size >= 1 and self.max_latency_ms >= 1, "batching: sizes must be >= 1")


@dataclass(frozen=True, kw_only=True)
class ResourcesConfig:
    """What one replica of the service declares it needs (BentoML's service `resources`, read by BentoCloud and
    deployment tooling; `bentoml serve` runs whatever it is given).
    """

    cpu: float = 2.0
    """CPU cores, > 0."""
    memory: str = "2Gi"
    """Memory as a Kubernetes-style quantity (e.g. `512Mi`, `2Gi`)."""

    def __post_init__(self) -> None:
        check(self.cpu > 0, "resources.cpu: must be > 0 (cores)")
        check(re.fullmatch(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti)", self.memory) is not None,
              f"resources.memory: {self.memory!r} is not a quantity such as 512Mi or 2Gi")

    def as_service(self) -> dict[str, str]:
        """As ``@bentoml.service(resources=...)`` takes it."""
        return {"cpu": f"{self.cpu:g}", "memory": self.memory}


# BentoML's export formats this stage offers and the file names they get (`bentoml import` goes by the name).
EXPORT_SUFFIX = {"bento": ".bento", "gz": ".tar.gz", "tar": ".tar"}


@dataclass(frozen=True, kw_only=True)
class PackageConfig:
    """The package stage: the model the gate chose, as a BentoML service (a Bento), exported to a registry."""

    name: str = "lm-pipeline"
    """The Bento's name (lower-case letters, digits, `-_.`); its models are `<name>-classifier`, `<name>-bert`, ..."""
    generative: tuple[str, ...] = ("bert", "gpt", "t5")
    """Paradigms whose pre-trained models ship beside the classifier (`fill_mask` / `generate` / `text2text`)."""
    generative_from: str = "pretrained"
    """Which weights those models ship: `pretrained` or `dapt`."""
    registry: str = "dist"
    """Where the Bento archive (`<name>-<version>` + the format's suffix) is exported: a folder or an fsspec URL
    (`s3://...`)."""
    export_format: str = "bento"
    """`bento` (BentoML's xz tarball), `gz` (`.tar.gz`: much faster to write, about as small) or `tar`; `bentoml
    import` reads all three."""
    signing: str = "key"
    """`key`: sign each model folder (OpenSSF Model Signing) and the Bento's SLSA provenance with the elliptic-curve
    key in `$LMPIPE_SIGNING_KEY`, else `~/.config/lm-pipeline/signing-key.pem` (made on first use); `none`: package
    unsigned (the Bento says so)."""
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    """The service's request limits."""
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    """Adaptive batching of `classify`."""
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    """What one replica declares it needs."""

    def __post_init__(self) -> None:
        check(re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,40}", self.name) is not None,
              f"name: {self.name!r} is not a valid BentoML name (lowercase letters, digits, '-', '_', '.')")
        bad = [p for p in self.generative if p not in PARADIGMS]
        check(not bad, f"generative: unknown paradigm(s) {bad}; choose from {list(PARADIGMS)}")
        check(self.generative_from in ("pretrained", "dapt"), "generative_from: must be 'pretrained' or 'dapt'")
        check(self.signing in ("key", "none"), f"signing: {self.signing!r} is not 'key' or 'none'")
        check(self.export_format in EXPORT_SUFFIX,
              f"export_format: {self.export_format!r} is not one of {list(EXPORT_SUFFIX)}")


def load_config(params_path: Path) -> PackageConfig:
    return build(PackageConfig, section(load_params(params_path), "package") or {}, "package")
