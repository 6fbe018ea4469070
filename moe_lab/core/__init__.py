"""The layer everything else builds on, importing nothing else of moe_lab: what the MoE
computation is (problems and sharding, routing, FP8 schemes, devices), the glue kernels
between a backend's kernels and the import of aiter's Triton modules, errors, provenance
and the file formats. Backends, measuring, data and analysis import it; it imports none
of them."""
