"""Tokenizer training, held-out splits and block packing for the three pre-training paradigms."""
