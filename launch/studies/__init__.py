"""Studies: designs of many runs, their record, their statistics and their report.

One module per idea: :mod:`~launch.studies.plan` (a study's design and the runs it makes),
:mod:`~launch.studies.run` (training them and landing each finished run in the record),
:mod:`~launch.studies.record` (the record file, one JSON line per run),
:mod:`~launch.studies.stats` (paired tests, Holm), :mod:`~launch.studies.report`,
:mod:`~launch.studies.tables` and :mod:`~launch.studies.plots` (the report, regenerated from the
record alone), :mod:`~launch.studies.svm` (the RBF-SVM anchor), :mod:`~launch.studies.pilot`
(a training-length rule's pilot); a study's own definition in its module, e.g.
:mod:`~launch.studies.digits` and :mod:`~launch.studies.realimages` (with
:mod:`~launch.studies.power`, what its plan can detect,
:mod:`~launch.studies.realimages_second`, its second registered family,
:mod:`~launch.studies.realimages_cost`, what its runs cost, and
:mod:`~launch.studies.realimages_commands`, its own ``power`` and ``flops`` commands;
:mod:`~launch.studies.ii_probe`, an exploratory probe of its Scale-II arm with its own command,
``python -m launch.studies.ii_probe``). The
imports point one way: a study's commands module imports its design and cost modules, the cost
module the design, the design the machinery (``plan``, ``power``, ``stats``); nothing is built
at import (``realimages.STUDY`` on first use). The command: ``python -m launch.studies digits
--help``, ``python -m launch.studies realimages --help``.
"""
