"""The tuned configuration files as data (issues 38, 41 and 63), one room: which shapes each
GPU must have a file for, where the files are, what they hold against the token grid, the
tuned against default points measured with them, the files against published tunings, and
the tuned layer's % of roof. Notebook 05, the findings and the device scripts read them
here (`from moe_lab.analysis import tuned`).

    required   REQUIRED, REQUIRED_63, REQUIRED_BY_DEVICE, required_for(device), shape_word,
               published_file(word, device), search_run(word, device), required_name
    paths      PAIR_KEY, file_names (with_device, file_paths, configs_folder, check_folders,
               check_required, is_history: the room's own helpers, from .paths)
    files      inventory, left, current_pairs, default_and_tuned, with_two_t, two_t_misses,
               tuning_metrics, shape_pairs, tune_table, tune_runs, newest_of, on_device,
               search_spread, tune_run, verify_points, verify_metrics, verify_runs
    published  published_pairs, published_metrics, ties_by_run
    roof       roof_from(pairs, ledger_df, tokens=256): per shape, the tuned layer's % of roof
"""
from .files import (  # noqa: F401
    INVENTORY_COLUMNS, TUNE_TABLE_NEEDS, current_pairs, default_and_tuned, inventory, left,
    newest_of, on_device, search_spread, shape_pairs, tune_run, tune_runs, tune_table,
    tuning_metrics, two_t_misses, verify_metrics, verify_points, verify_runs, with_two_t)
from .paths import PAIR_KEY, file_names  # noqa: F401 (the rest of paths: the room's own helpers)
from .published import published_metrics, published_pairs, ties_by_run  # noqa: F401
from .required import (  # noqa: F401
    COMPARED, LLAMA4, PUBLISHED_FOR, REQUIRED, REQUIRED_63, REQUIRED_BY_DEVICE, SEEDS,
    published_file, required_for, required_name, search_run, shape_word)
from .roof import FROM_TOKENS, roof_from  # noqa: F401
