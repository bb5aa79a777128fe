"""The run machinery, one idea per module (the map is in :mod:`invjax.train`, its entry point)."""
