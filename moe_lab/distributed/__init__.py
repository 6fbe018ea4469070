"""Expert parallelism across processes with torch.distributed (issue 16).

One MoE layer over N ranks, three ways (the `parallel` column of a row):

    tp-allreduce   every rank holds an I/N slice of every expert, runs all tokens,
                   an all-reduce sums the partial outputs (vLLM's TP without EP)
    ep-allreduce   every rank holds E/N whole experts (expert map: -1 for remote ones),
                   runs all tokens, an all-reduce sums (the seed's TP8 EP8 layout)
    ep-alltoall    every rank owns T/N of the tokens, sends each (token, slot) pair to
                   the rank holding its expert and gets the results back
                   (`all_to_all_single` dispatch and combine, the DP+EP way); the layer
                   ends with each rank holding its own tokens' output

Modules: `shards` (weights of the full layer and each rank's real shard), `layers` (the
three variants), `control` (status exchange through the rendezvous store, with
timeouts), `worker` (one rank's point loop), `launch` (spawn N ranks or run under
torchrun; one sweep part per GPU), `analysis` (imbalance, collective model, the N-GPU
estimate and the targets: pure pandas). The variants' names (the `parallel` column) are
the rows' vocabulary: moe_lab.storage.vocabulary.VARIANTS.
"""
DIST_TIMEOUT_S = 120.0  # a collective that waits longer fails the point (launch, worker)
PARENT_ENV = "MOE_LAB_PARENT_PID"  # set by launch.spawn: its ranks die with that pid (worker)
SIGNAL_NOTE_ENV = "MOE_LAB_SIGNAL_NOTE"  # set by launch.spawn: a file the rank writes at a SIGTERM
