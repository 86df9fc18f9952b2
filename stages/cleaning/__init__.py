"""Corpus cleaning: C4 rules as small filters over documents, plus optional Gopher and MinHash filters."""
