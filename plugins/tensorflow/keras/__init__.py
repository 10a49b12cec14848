"""horo for Keras 3 (placeholder)."""
