"""invjax: image classifiers with guaranteed invariances (Rath & Condurache, AISTATS 2023) in JAX."""

__version__ = "0.1.0"
