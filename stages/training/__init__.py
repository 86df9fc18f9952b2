"""One training loop for the three paradigms: models from configs, block sampling, checkpoints, DDP."""
