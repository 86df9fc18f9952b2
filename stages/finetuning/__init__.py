"""Fine-tuning on the labeled task: examples, classifier heads per paradigm, metrics."""
