"""Data-quality gates: Great Expectations checks that stand between pipeline stages.

`gate` runs a list of expectations over named pandas DataFrames and writes a JSON report;
`suites` builds the standard checks for the document and labeled-example contracts.
Great Expectations itself is imported only when a gate runs, so importing this package is cheap.
"""
