"""Measuring: the sweep, a point's path, the timers, profiling, compile, tuning, correctness."""
