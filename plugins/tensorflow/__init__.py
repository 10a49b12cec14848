"""horo for TensorFlow (placeholder while being written)."""
