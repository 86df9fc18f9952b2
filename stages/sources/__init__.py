"""Source readers: each turns one kind of input (``kind:`` in params.yaml) into
:class:`stages.common.documents.Record` objects, importing its heavy dependencies lazily."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Union

from stages.common.documents import Record
from stages.sources.base import Provenance, SourceContext, SourceError
from stages.sources.debian import (DebianDescriptionsSource, DebianDocsSource, read_debian_descriptions,
                                   read_debian_docs)
from stages.sources.files import FilesSource, read_files
from stages.sources.hf import HFSource, read_hf
from stages.sources.npm import BrownSource, SpamAssassinSource, read_brown, read_spamassassin

SourceConfig = Union[FilesSource, HFSource, SpamAssassinSource, BrownSource, DebianDocsSource, DebianDescriptionsSource]

__all__ = ["SourceConfig", "SourceError", "Provenance", "SourceContext", "read_source"]

# Each kind's reader, called with (config, context, provenance); files and hf need no context.
_READERS = {
    FilesSource: lambda cfg, ctx, prov: read_files(cfg, prov), HFSource: lambda cfg, ctx, prov: read_hf(cfg, prov),
    SpamAssassinSource: read_spamassassin, BrownSource: read_brown, DebianDocsSource: read_debian_docs,
    DebianDescriptionsSource: read_debian_descriptions,
}


def read_source(cfg: SourceConfig, ctx: SourceContext, prov: Provenance) -> Iterator[Record]:
    """Dispatch to the reader of ``cfg.kind``; the reader fills ``prov`` as it goes."""
    if type(cfg) not in _READERS:
        raise TypeError(f"unknown source config {cfg!r}")
    return _READERS[type(cfg)](cfg, ctx, prov)
