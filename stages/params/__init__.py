"""What params.yaml holds: its sections and the config classes that read them (the params reference and the
profiles check against these)."""
