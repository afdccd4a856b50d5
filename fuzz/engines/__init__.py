"""Sharded normalization: the function split over a mesh of ranks, rows over "data" and each row's tokens
over "sequence", run on the engines' own launch and collectives and judged on the whole batch.

One module per job: `split` (the Hypothesis strategy for a mesh and a split of a Case), `torch_ranks`
(a pool of torch.distributed rank processes kept alive across examples), `jax_worker` (a worker process
with host-platform CPU devices running shard_map), `judge` (gathering per-rank results and judging them
against the reference and the exact VJP), `snippets` (counterexamples that launch their own ranks),
`cell` and `plan` (one sharded cell under Hypothesis; the plan of cells), `registry` (the engines by name),
`chunks` and `accumulation` (a step split into R x G chunks; the in-process engine that calls a per-chunk
function on each), `torch_ddp` and `jax_accumulation` (the rank forms of a per-chunk function under DDP and
under shard_map), `jax_mesh` and `jax_plain` (a per-shard body under shard_map; a plain jit on sharded inputs),
`replies` (what a rank sends back) and `freshness` (whether a kept process still runs the user's code as it is
on disk). Nothing here imports a framework at module level.
"""
