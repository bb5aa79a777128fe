"""The digits study: which invariant networks learn from fewer images, on the offline digits.

Datasets ``scaled_digits`` (scikit-learn's digits shrunk by s ~ U(0.3, 1)) and
``rotscaled_digits`` (also rotated by theta ~ U(0, 360) degrees); 1079 / 359 / 359 images.
``docs/results/digits/README.md`` states the protocol with its figures; in short:

1. **Tuning, once per family and dataset**: every family trains on the 80:20 split of the 1079
   training digits (863 / 216, realisation 0, seed 0) with six candidates, learning rate x
   {1/3, 1, 3} of its config's x weight decay {1e-5, 3e-4} (the RBF-SVM: C x gamma); the
   lowest held-out error of the last epoch wins and is fixed for every N_t. The two-phase
   networks tune their head on their streams' choices; the controls inherit.
2. **Main runs**: every family at N_t in :data:`SIZES` and realisations :data:`SEEDS` (seed k =
   realisation k and the class-balanced subset drawn by k), at least 600 steps and 300 epochs
   (:data:`MAIN_RULE`; :data:`FIRST_RULE`'s 60 epochs before 2026-11-27), x0.1 after 2/3, the
   last epoch's model reported.
3. **Claims** (:data:`CLAIMS`): paired t-tests over the realisations, Holm over every complete
   comparison, a verdict per claim and N_t.
"""

from __future__ import annotations

from launch import sweep
from launch.studies.plan import Family, Rule, Study

DATASETS = ("scaled_digits", "rotscaled_digits")
ROT = ("rotscaled_digits",)
N_ALL = 1079  # the digits' training split
SIZES = (20, 50, 100, 300, 0)
SEEDS = (0, 1, 2, 3, 4, 5)
# The monomial network's settings (sizes, x2 upsampling, recipe): configs/digits_monomials.py.
MONO_STEM = "digits_monomials"
WRN_STEMS = ("digits_std", "digits_e2", "digits_scale", "digits_e2_rot")
DUAL_STEPS = 2 + 1 / 4  # two streams of S steps and a head of S / 4
TRIPLE_STEPS = 3 + 1 / 4

# The rule the study started with (2026-11-25): run directories are named by N_t alone under it.
FIRST_RULE = Rule()
# The main runs' rule since 2026-11-27: at least 300 epochs. N_t <= 100 train exactly as under
# the first rule (600 or 300 epochs already); N_t = 300 and 1079 train 300 epochs instead of
# 120 and 60. 137 of the first rule's 612 main runs had ended unconverged, 105 of them at
# N_t >= 300; the length was fixed by the rule pilot (launch/studies/pilot.py) on the tuning
# split alone (README: at 150 epochs 3 of 4 pilot runs were unconverged).
MAIN_RULE = Rule(min_epochs=300)


def _ws_net_overrides() -> dict:
    """The monomial family's network (``configs/digits_monomials.py``) with the WS head: the
    model keys of the WS config that the monomial config sets otherwise (widths, kernel,
    scales, ...), the head excepted (the pruning and monomial keys are the monomials' own)."""
    mono = sweep.load_config(MONO_STEM, {}).model
    ws = sweep.load_config("mnist_ii_disco_ws", {}).model
    return {f"model.{k}": mono[k] for k in mono if k in ws and k != "head" and mono[k] != ws[k]}


def _families() -> dict[str, Family]:
    d = DATASETS
    streams2 = (("e2", "e2_ii"), ("scale", "scale_iiws_disco"))
    streams3 = (*streams2, ("std", "wrn_std"))
    pool, hermite = {"model.head": "pool"}, {"model.scale_basis": "hermite"}
    return {
        "cnn": Family("digits_cnn", d),
        "svm": Family(None, d),
        "wrn_std": Family("digits_std", d),
        "e2_pool": Family("digits_e2", d, pool),
        "e2_ii": Family("digits_e2", d),
        "e2rot_pool": Family("digits_e2_rot", ROT, pool),
        "e2rot_ii": Family("digits_e2_rot", ROT),
        "scale_pool_disco": Family("digits_scale", d, pool),
        "scale_pool_hermite": Family("digits_scale", d, pool | hermite),
        "scale_iiws_disco": Family("digits_scale", d),
        "scale_iiws_hermite": Family("digits_scale", d, hermite),
        "scale_iimono_disco": Family(MONO_STEM, d),
        "scale_iiws_mnet_disco": Family("mnist_ii_disco_ws", d, _ws_net_overrides()),
        "dual": Family("digits_dual", d, tune="head", streams=streams2),
        "triple": Family("digits_triple", d, tune="head", streams=streams3),
        # controls: size (constant parameters), ensembling (three standard streams), steps
        "dual_star": Family(
            "digits_dual_star", d, tune="inherit", streams=streams2, hp_from="dual"
        ),
        "triple_star": Family(
            "digits_triple_star", d, tune="inherit", streams=streams3, hp_from="triple"
        ),
        "triple_std": Family(
            "digits_triple_std",
            d,
            tune="inherit",
            streams=(("e2", "wrn_std"), ("scale", "wrn_std"), ("std", "wrn_std")),
            hp_from="triple",
        ),
        "e2_ii_steps_dual": Family(
            "digits_e2", d, tune="inherit", hp_from="e2_ii", steps_factor=DUAL_STEPS
        ),
        "scale_iiws_disco_steps_dual": Family(
            "digits_scale", d, tune="inherit", hp_from="scale_iiws_disco", steps_factor=DUAL_STEPS
        ),
        "wrn_std_steps_triple": Family(
            "digits_std", d, tune="inherit", hp_from="wrn_std", steps_factor=TRIPLE_STEPS
        ),
    }


# The paper's claims as (claim, the family claimed better, the one it should beat, datasets).
CLAIMS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("E(2)-II beats pooling (II over flips)", "e2_ii", "e2_pool", DATASETS),
    ("E(2)-II beats pooling (II over rotations)", "e2rot_ii", "e2rot_pool", ROT),
    ("Scale-II WS beats pooling (DISCO)", "scale_iiws_disco", "scale_pool_disco", DATASETS),
    ("Scale-II WS beats pooling (Hermite)", "scale_iiws_hermite", "scale_pool_hermite", DATASETS),
    ("Scale-II WS beats monomials", "scale_iiws_mnet_disco", "scale_iimono_disco", DATASETS),
    ("dual beats its E(2) stream", "dual", "e2_ii", DATASETS),
    ("dual beats its Scale stream", "dual", "scale_iiws_disco", DATASETS),
    ("triple beats its E(2) stream", "triple", "e2_ii", DATASETS),
    ("triple beats its Scale stream", "triple", "scale_iiws_disco", DATASETS),
    ("triple beats its std stream", "triple", "wrn_std", DATASETS),
    ("triple beats dual", "triple", "dual", DATASETS),
    ("dual* (one stream's size) beats the E(2) stream", "dual_star", "e2_ii", DATASETS),
    ("dual* beats the Scale stream", "dual_star", "scale_iiws_disco", DATASETS),
    ("triple* (one stream's size) beats the std WRN", "triple_star", "wrn_std", DATASETS),
    ("triple beats three std streams (ensembling)", "triple", "triple_std", DATASETS),
    ("dual beats the E(2) stream at dual's steps", "dual", "e2_ii_steps_dual", DATASETS),
    (
        "dual beats the Scale stream at dual's steps",
        "dual",
        "scale_iiws_disco_steps_dual",
        DATASETS,
    ),
    ("triple beats the std WRN at triple's steps", "triple", "wrn_std_steps_triple", DATASETS),
)

STUDY = Study(
    name="digits",
    datasets=DATASETS,
    families=_families(),
    claims=CLAIMS,
    sizes=SIZES,
    seeds=SEEDS,
    n_all=N_ALL,
    val_fraction=0.2,
    lr_factors=(1 / 3, 1.0, 3.0),
    weight_decays=(1e-5, 3e-4),
    svm_grid=tuple((c, g) for c in (1.0, 10.0, 100.0) for g in (0.3, 1.0)),  # gamma x 'scale'
    first_rule=FIRST_RULE,
    main_rule=MAIN_RULE,
    # Float32 products on every backend, so that runs on CPUs and GPUs compute the same
    # arithmetic ('default' is float32 on CPUs, but TF32 on NVIDIA GPUs since Ampere).
    precision="highest",
    wrn_stems=WRN_STEMS,
    mono_stem=MONO_STEM,
    anchors=("cnn", "svm"),
)
