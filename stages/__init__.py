"""Pipeline stages: each module is a pure core function plus a thin ``main()`` that DVC and Prefect call.

Keep this package light to import: heavy libraries (torch, transformers, great_expectations, datasets)
are imported inside the functions that need them.
"""
