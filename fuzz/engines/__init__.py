"""Sharded normalization: the function split over a mesh of ranks, rows over "data" and each row's tokens
over "sequence", run on the engines' own launch and collectives and judged on the whole batch.

One module per job: `split` (the Hypothesis strategy for a mesh and a split of a Case), `torch_ranks`
(a pool of torch.distributed rank processes kept alive across examples), `jax_worker` (a worker process
with host-platform CPU devices running shard_map), `judge` (gathering per-rank results and judging them
against the reference and the exact VJP), `snippets` (counterexamples that launch their own ranks) and
`cells` (one sharded cell under Hypothesis, and the plan of cells). Nothing here imports a framework at
module level.
"""
