"""Inference for the packaged models (the Bento service imports these; nothing here imports bentoml)."""
