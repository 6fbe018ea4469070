"""Importing: other projects' measurements as moe-lab runs."""
