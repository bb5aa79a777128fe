"""Parameter counts of the peers' own networks, beside which ``python -m invjax.summary`` prints
invjax's (the rows without II are the peers' networks).

Every count was measured by building the peer's network in PyTorch (CPU, ``num_classes=10``) and
summing ``p.numel()`` over its trainable parameters; nothing here is computed by invjax:

* e2cnn 0.2.3 from PyPI with torch 2.13.0 and numpy < 2 (in a separate venv; one line of
  e2cnn's ``basisexpansion_singleblock.py`` patched from a ``uint8`` to a ``bool`` mask, which
  current torch requires and which does not change any shape), with
  ``experiments/models/e2_wide_resnet.py`` of QUVA-Lab/e2cnn_experiments and its defaults
  ``F=1., sigma=0.45, fixparams=True, conv2triv=True``;
* the plain WRN of the same repository, ``experiments/models/wide_resnet.py``;
* DISCO's STL-10 WRN, ``wrn_disco`` of ISosnovik/disco ``models/stl_disco_models.py`` with its
  shipped basis ``precalculated_basis/size=5_eff_size=3_scales=[1.0, 1.41, 2.0].pt``.

e2cnn's CIFAR-10 WRN28-10 (``Wide_ResNet(28, 10, 0.3, N=8, r=1)``, D8, D4, D4) was not
measured: building it took over 13 GB and 40 minutes on the 2-core development machine and was
stopped. The same network at widen factors 1 and 2 was measured instead
(:data:`PEER_COUNTS_NARROW`); invjax's ``cifar10_e2_pool`` at those widths equals them, and its
WRN28-10 count (35,351,974) follows from the same rules.

Known differences: the STL-10 scale stream has a 32-channel stem (the paper's Table 15) where
DISCO's code has 16 (+0.19%).
"""

from __future__ import annotations

# name in invjax/configs/models.py -> (count, the peer's constructor that was measured)
PEER_COUNTS: dict[str, tuple[int, str]] = {
    "svhn_std": (2_748_890, "e2cnn_experiments wide_resnet.WideResNet(16, 10, 4, 0.3)"),
    "cifar10_std": (36_479_194, "e2cnn_experiments wide_resnet.WideResNet(28, 10, 10, 0.3)"),
    "stl10_std": (
        10_961_370,
        "e2cnn_experiments wide_resnet.WideResNet(16, 10, 8, 0.3, initial_stride=2)",
    ),
    "svhn_e2_pool": (
        6_421_518,
        "e2cnn_experiments Wide_ResNet(16, 4, 0.3, num_classes=10, N=8, r=-1, f=True)",
    ),
    "stl10_e2_pool": (
        11_957_234,
        "e2cnn_experiments Wide_ResNet(16, 8, 0.3, num_classes=10, N=8, r=3, f=True, "
        "initial_stride=2) (e2wrn16_8_stl: D8, D4, D1)",
    ),
    "stl10_scale_pool": (10_961_370, "DISCO wrn_disco(basis_save_dir) (WRN16-8, stem 16)"),
}

# (name, widen_factor) -> (count, constructor): the peer network at a smaller width, where the
# full one was too large to build here.
PEER_COUNTS_NARROW: dict[tuple[str, int], tuple[int, str]] = {
    ("cifar10_e2_pool", 1): (
        345_660,
        "e2cnn_experiments Wide_ResNet(28, 1, 0.3, num_classes=10, N=8, r=1, f=True)",
    ),
    ("cifar10_e2_pool", 2): (
        1_405_182,
        "e2cnn_experiments Wide_ResNet(28, 2, 0.3, num_classes=10, N=8, r=1, f=True)",
    ),
}
