"""Data-quality gates: Great Expectations checks between pipeline stages (`gate`) and the standard suites."""
