"""Source readers: each turns one kind of input into :class:`stages.common.documents.Record` objects.

The kinds (``kind:`` in params.yaml): ``files``, ``hf``, ``npm_spamassassin``, ``npm_brown``,
``debian_docs``, ``debian_descriptions``. Readers import their heavy dependencies lazily.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Union

from stages.common.documents import Record
from stages.sources.base import Provenance, SourceContext, SourceError
from stages.sources.debian import DebianDescriptionsSource, DebianDocsSource
from stages.sources.files import FilesSource
from stages.sources.hf import HFSource
from stages.sources.npm import BrownSource, SpamAssassinSource

SourceConfig = Union[FilesSource, HFSource, SpamAssassinSource, BrownSource, DebianDocsSource, DebianDescriptionsSource]

__all__ = ["SourceConfig", "SourceError", "Provenance", "SourceContext", "read_source"]


def read_source(cfg: SourceConfig, ctx: SourceContext, prov: Provenance) -> Iterator[Record]:
    """Dispatch to the reader of ``cfg.kind``; the reader fills ``prov`` as it goes."""
    if isinstance(cfg, FilesSource):
        from stages.sources.files import read_files

        return read_files(cfg, prov)
    if isinstance(cfg, HFSource):
        from stages.sources.hf import read_hf

        return read_hf(cfg, prov)
    if isinstance(cfg, SpamAssassinSource):
        from stages.sources.npm import read_spamassassin

        return read_spamassassin(cfg, ctx, prov)
    if isinstance(cfg, BrownSource):
        from stages.sources.npm import read_brown

        return read_brown(cfg, ctx, prov)
    if isinstance(cfg, DebianDocsSource):
        from stages.sources.debian import read_debian_docs

        return read_debian_docs(cfg, ctx, prov)
    if isinstance(cfg, DebianDescriptionsSource):
        from stages.sources.debian import read_debian_descriptions

        return read_debian_descriptions(cfg, ctx, prov)
    raise TypeError(f"unknown source config {cfg!r}")
