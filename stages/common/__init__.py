"""Parts shared by stages: atomic outputs, the document schema, small helpers."""
