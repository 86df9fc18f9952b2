"""Evaluation parts: in-context learning, intrinsic scores, the model quality gate, the report."""
