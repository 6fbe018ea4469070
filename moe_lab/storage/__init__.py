"""Storage: run folders, the result row, merging, resuming, the writer's lock, invocations, launch configurations."""
