"""JAX's persistent compilation cache, on by default for invjax's command-line programs.

Compiling a network's train step takes tens of seconds (a minute for the E(2)-II WRN28-10 on a
GPU, most of it autotuning float32 convolutions); a second start of the same config (a resume,
another seed, another N_t: the same shapes) loads the compiled programs from disk instead.

Where: ``--compilation_cache=DIR`` of the command, else ``$INVJAX_COMPILATION_CACHE``, else
``$JAX_COMPILATION_CACHE_DIR`` (JAX's own variable), else ``$XDG_CACHE_HOME/invjax/xla`` (default
``~/.cache/invjax/xla``). The value ``off`` (or an empty string) disables it. An unusable
directory disables the cache with a warning: a cache never stops a run.
"""

from __future__ import annotations

import os

import jax
from absl import logging

OFF = ("", "0", "off", "none", "false")


def default_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "invjax", "xla")


def resolve(path: str | None = None) -> str | None:
    """The cache directory that :func:`enable` would use, or None when disabled."""
    for value in (
        path,
        os.environ.get("INVJAX_COMPILATION_CACHE"),
        os.environ.get("JAX_COMPILATION_CACHE_DIR"),
    ):
        if value is not None:
            return None if value.strip().lower() in OFF else os.path.abspath(value)
    return default_dir()


def enable(path: str | None = None) -> str | None:
    """Turn the persistent cache on (see the module docstring); returns the directory or None."""
    directory = resolve(path)
    if directory is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    try:
        os.makedirs(directory, exist_ok=True)
        if not os.access(directory, os.W_OK):
            raise PermissionError(f"{directory} is not writable")
    except OSError as e:
        logging.warning("compilation cache disabled: %s", e)
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", directory)
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        # JAX's default (1 s) leaves out the many small programs of a run (state init,
        # evaluation, hooks) that add up to seconds at every start.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return directory
