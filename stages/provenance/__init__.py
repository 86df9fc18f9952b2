"""Provenance: what made a packaged model (the lineage record), printed as a chain and verified against a
workspace. ``stages.lineage`` is the command; ``stages.package`` writes the record into the Bento."""
