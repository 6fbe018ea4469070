"""One module per `moe-lab` verb: `configure(parser)` adds its arguments, `run(args)`
returns the exit code. They parse and print; the work is done by the package modules."""
