"""The tuned files a tune run writes (moe_lab.measuring.tuning.Tuner.write_files): one file
per stage and shape, {tokens: config}, in the format the kernel's own project reads, with
`provenance.json` beside them, all or none.

A file holds one run's winners: writing it replaces the whole table. A file of the same
shape that another run wrote (provenance.json's `run`) and that holds token counts this run
does not tune would lose them, so such a file is refused, in one line naming it, the keys
and the run, before the search starts (`refuse_dropping`, from Tuner.check: no timing is
spent) and again where the files are written (`write_files`: a file that appeared during
the search, or a key this run found no winner for), there with nothing written to the
configs folder and the run's winners and candidates kept in its folder. A resume of the run
that wrote the file, and a file whose keys are all this run's, are replaced as before. A
file that cannot be read (its keys unknown) is refused the same way, unless this run wrote
it."""
from __future__ import annotations

import json
from pathlib import Path

from ..core.environment import now_iso
from ..core.errors import UsageError
from ..core.problems import Problem
from ..storage.configs import tuned_file_paths


SHAPE = ("model", "tp", "ep", "ep_rank", "dtype")  # a file's shape: winners' columns


def read_provenance(folder: Path) -> dict:
    from ..storage.store import read_json
    return read_json(Path(folder) / "provenance.json")


def dropped_keys(folder: Path, files: dict, run: str, prov: dict) -> list[tuple]:
    """[(path, keys, the run that tuned them)] for each of `files` ({file name: the token
    counts this run writes to it}) under `folder` that holds keys outside them and that no
    earlier command of `run` wrote (provenance.json's entry; none: None). Such a file that
    cannot be read: UsageError (what it holds cannot be kept, or even known)."""
    out = []
    for name, keys in files.items():
        p = Path(folder) / name
        entry = prov.get(name) if isinstance(prov.get(name), dict) else {}
        by = entry.get("run")
        if not p.is_file() or (by is not None and str(by) == str(run)):
            continue
        try:
            from ..core.config_files import read_table
            lost = sorted(set(read_table(p)) - {int(k) for k in keys})
        except ValueError as e:  # unreadable (CorruptFile too): its keys cannot be known
            raise UsageError(f"{str(e).splitlines()[0] if str(e) else type(e).__name__}: "
                             "writing this run's winners would replace it, whatever token "
                             "counts it holds; move it away or repair it first, or give "
                             "another --configs-dir") from None
        if lost:
            out.append((p, lost, by))
    return out


def _dropped_line(dropped: list[tuple], why: str, then: str) -> str:
    p, lost, by = dropped[0]
    more = len(dropped) - 1
    return (f"{p} holds token counts {','.join(map(str, lost))} tuned by "
            + (f"run {by}" if by is not None else "a run provenance.json does not name")
            + f" that {why}: writing this run's winners would drop them from it"
            + (f" (and from {more} other file{'s' if more > 1 else ''} of {p.parent})"
               if more else "") + f"; {then}")


def refuse_dropping(tuner, shards) -> None:
    """Before the search (Tuner.check): UsageError, one line, when a tuned file of a shard
    holds token counts that neither this command nor an earlier one of its run tunes and
    another run (or none provenance.json names) tuned them."""
    from ..storage.store import RunStore
    folder = tuner.configs_dir / tuner.backend_name
    if not folder.is_dir():
        return
    old = RunStore(tuner.run_dir, create=False).load_table("winners").to_dict("records") \
        if tuner.run_dir.is_dir() else []
    files, wanted = {}, set()
    for shard in shards:
        shape = {k: shard[0].key()[k] for k in SHAPE}
        keys = {int(p.tokens) for p in shard}  # and the run's winners of earlier commands
        keys |= {int(r["tokens"]) for r in old if all(r.get(k) == v for k, v in shape.items())}
        paths = tuned_file_paths(tuner.backend_name, shard[0], tuner.device_name,
                                 tuner.configs_dir)
        for name in dict.fromkeys(p.name for p in paths.values()):  # gemm1's first; once
            files[name] = files.get(name, set()) | keys
        wanted |= keys
    lost = dropped_keys(folder, files, tuner.run_dir.name, read_provenance(folder))
    if lost:
        tokens = ",".join(map(str, sorted(wanted | {k for _, ks, _ in lost for k in ks})))
        raise UsageError(_dropped_line(
            lost, "this run does not tune",
            f"tune those token counts too (--tokens {tokens}), or give another --configs-dir"))


def write_files(tuner, winners) -> list[Path]:
    """One file per stage and shard: {tokens: config}, every winner tuned so far, and
    each file's provenance (run, commit, budget, candidates timed); all or none. A file
    that would drop another run's keys: UsageError, nothing written (module doc)."""
    from ..core.atomic import atomic_write_files, json_text
    from ..core.config_files import table_json
    folder = tuner.configs_dir / tuner.backend_name
    prov = read_provenance(folder)  # unreadable: refused before any table is replaced
    written, shard_of = [], {}
    for _, g in winners.groupby(list(SHAPE)):
        prob = _problem_of(g.iloc[0])
        tables: dict[str, dict] = {}
        for r in g.itertuples():
            for stage, cfg in json.loads(r.config).items():
                tables.setdefault(stage, {})[int(r.tokens)] = cfg
        paths = tuned_file_paths(tuner.backend_name, prob, tuner.device_name, tuner.configs_dir)
        timed = int(g["candidates_timed"].fillna(0).sum()) \
            if "candidates_timed" in g.columns else None
        for stage, table in tables.items():
            p = paths[stage]
            written.append((p, json_text(table_json(table))))
            shard_of[p.name] = (sorted(table), timed)
    lost = dropped_keys(folder, {n: k for n, (k, _) in shard_of.items()},
                        tuner.run_dir.name, prov)
    if lost:  # the search's rows and winners are in the run folder already (Tuner._run)
        raise UsageError(_dropped_line(
            lost, "this run has no winner for",
            f"nothing was written to {folder}; this run's winners are in "
            f"{tuner.run_dir / 'winners.parquet'} and its candidates in "
            f"{tuner.run_dir / 'candidates.parquet'} (the same command with another "
            "--configs-dir writes its files there without timing again)"))
    man = tuner.store.read_manifest() if hasattr(tuner, "store") else {}
    for p, _ in written:
        keys, timed = shard_of[p.name]
        prov[p.name] = dict(run=tuner.run_dir.name, git_commit=tuner.git_commit,
                            device=tuner.device_name, written=now_iso(),
                            mode=tuner.mode, seed=tuner.seed, rep_ms=tuner.rep_ms,
                            budget_s=tuner.budget_s,
                            wall_s_total=man.get("wall_s_total", man.get("wall_s")),
                            invocations=len(man.get("invocations") or []) or None,
                            candidates_timed=timed, keys=keys,
                            search=tuner.plan.describe(),
                            note="winners of moe-lab tune; every candidate's time is in "
                                 f"data/runs/{tuner.run_dir.name}/candidates.parquet")
    # the tables and their provenance all or none (a failure leaves the old set whole)
    atomic_write_files({**dict(written), folder / "provenance.json": json_text(prov)})
    return [p for p, _ in written]


def _problem_of(row) -> Problem:
    from ..core.problems import make_problem
    return make_problem(row["model"], int(row["tokens"]), row["dtype"], int(row["tp"]),
                        int(row["ep"]), int(row["ep_rank"]))
