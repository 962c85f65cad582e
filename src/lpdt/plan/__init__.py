"""The workflow's planner: how long a scale's training jobs take, apart from the paper's cost
model (``lpdt.cost``: operation counts, energy, memory and bytes of the paper's arithmetic).

- ``lpdt.plan.runtime``: measured seconds per training sample, evaluation image, gossip entry
  and start-up on the reference CPU, a job's estimate, longest-first packing onto job slots,
  and the end-of-run check of the plan against the jobs' own times.
- ``lpdt.plan.gpu``: the price of a run on one H100 (measured steps where measured, else
  derived from ``lpdt.plan.counts``, the work of a step counted on the CPU), with a low-high
  range and its basis; ``lpdt.plan.gpu_table``: the GPU scale's plan.
- ``lpdt.plan.probe``: the speed probe, a few seconds of training steps on this machine that
  scale the reference CPU's costs to it.
- ``lpdt.plan.table``: the plan that ``snakemake plan`` (and ``make report``) prints and writes.

Nothing here imports torch at module level: the workflow imports it while it builds its DAG.
"""
