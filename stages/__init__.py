"""Pipeline stages, one command-line module each (docs/architecture.md); heavy libraries are imported lazily."""
