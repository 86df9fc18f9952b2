"""Pre-training objectives: what each paradigm does to a block of tokens before the model sees it."""
