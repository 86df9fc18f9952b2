"""Data-quality gates: Great Expectations checks that stand between pipeline stages.

`gate` runs expectations over named DataFrames and writes a JSON report (GX imported only then); `suites`
builds the standard checks for the document and labeled-example contracts.
"""
