"""horo for PyTorch (placeholder while being written)."""
