"""Prefect flows and deployments. They call the stages (via ``dvc repro``) and hold no stage logic."""
