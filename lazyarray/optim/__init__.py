"""Optimizers: SGD, Adam, AdamW, gradient clipping."""
