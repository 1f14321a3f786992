"""Eliminating mesh dimensions one at a time: DTensor on a simulated or a real device mesh.

Submodules, one job each (import from the module that owns a function; this package
re-exports nothing):

- :mod:`.simulated` opens a simulated world or mesh (the ``"fake"`` process group and
  ``LocalTensorMode``) and makes named meshes; self-contained, it needs only torch;
- :mod:`.uneven` holds ``from_local`` and ``redistribute`` that work for uneven shards,
  with the per-rank-size workaround and a record of each redistribution;
- :mod:`.steps` reads what every rank holds (:class:`~.steps.Step`, ``rank_states``,
  ``snapshot``) and merges the records of real processes;
- :mod:`.draw` draws a step as a matrix of matrices and lists it rank by rank;
- :mod:`.walkthrough` holds the mesh-elimination fragment, written once, and runs it as
  written or with the uneven-safe calls, recording every step;
- :mod:`.trace` observes what a simulated world emulates and replaces;
- :mod:`.gathers` probes redistributes that change several mesh dims at once, and the
  merged all-gather of uneven pieces;
- :mod:`.rooted` probes broadcast and scatter from a source rank, and replays the
  emulated broadcast;
- :mod:`.fsdp` lays a weight out with FSDP2 over tensor parallelism;
- :mod:`.observations` collects the page's simulated observations, to compare releases;
- :mod:`.torchrun` is the entry point ``torchrun`` runs on each real process;
- :mod:`.launch` launches it on 8 gloo processes and stores the real runs.

>>> from explainers.mesh.walkthrough import FRAGMENT
>>> [label for _, label, _ in FRAGMENT][:4]
['start', 'shard K', 'shard N', 'shard M']
"""
