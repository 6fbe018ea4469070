"""The cost model: what a layer call must compute and move, its fastest time on a device
(roofline), and each phase's floor (ledger). Pure functions; measuring and analysis both
read it."""
