"""Invocations: who measured into a run folder, when, with what. Every call of a sweep or a
tune writes its entry when it starts and closes it when it ends, so a resumed folder keeps
its history and a call killed without bookkeeping (SIGKILL) stays listed as killed."""
from __future__ import annotations

import sys
import time

KILLED = "killed: no wall time or counts recorded"
# manifest keys a resumed sweep keeps from the folder's previous manifest
KEPT_ON_RESUME = ("provenance_note", "notes", "corrections", "warnings")


def begin_invocation(store, manifest: dict, started: float) -> list[dict]:
    """Write `manifest` with this invocation appended to the folder's history (a resumed
    folder keeps its start, notes and earlier invocations; one that died without
    bookkeeping is marked KILLED). Returns the invocation list; `end_invocation` closes
    its last entry."""
    prior = store.read_manifest()
    manifest = dict(manifest, status="running")
    invocations = []
    if prior:
        manifest["started"] = prior.get("started", manifest.get("started"))
        if prior.get("status") == "running":
            manifest["previous_status"] = KILLED
        manifest["resumed"] = prior.get("resumed", 0) + 1
        manifest["wall_s_previous"] = prior.get("wall_s_total", prior.get("wall_s", 0))
        for k in KEPT_ON_RESUME:
            if k in prior:
                manifest[k] = prior[k]
        invocations = [dict(i, status=KILLED) if i.get("status") == "running" else i
                       for i in (prior.get("invocations") or [_invocation_from(prior)])]
    env = manifest.get("environment") or {}
    if env.get("git_warning"):  # a copy without .git: rows say 'unknown', and this says why
        said = list((prior or {}).get("warnings") or [])
        manifest["warnings"] = said + [w for w in [env["git_warning"]] if w not in said]
        print(f"moe-lab: warning: {env['git_warning']}", file=sys.stderr, flush=True)
    invocations.append(dict(
        started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        status="running", command=manifest.get("command"), git_commit=env.get("git_commit"),
        device_name=env.get("device_name"), boot_id=env.get("boot_id"),
        gpu_uuid=env.get("gpu_uuid")))  # which machine and GPU: leases share a hostname
    manifest["invocations"] = invocations
    store.write_manifest(manifest)
    return invocations


def end_invocation(store, invocations: list[dict], started: float, status: str,
                   measured: int, skipped: int) -> None:
    wall = time.time() - started
    finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    invocations[-1].update(finished=finished, wall_s=round(wall, 1), status=status,
                           points_measured=measured, points_skipped=skipped)
    prev = store.read_manifest().get("wall_s_previous", 0)
    try:
        store.update_manifest(finished=finished, wall_s=round(wall, 1),
                              wall_s_total=round(wall + prev, 1), status=status,
                              points_measured_this_run=measured,
                              points_skipped_already_done=skipped, invocations=invocations)
    except OSError as exc:  # a full disk: the manifest stays "running" (a resume says killed),
        from ..core.errors import disk_full  # and the error that stopped the writer is the one
        if not disk_full(exc):
            raise


def _invocation_from(prior: dict) -> dict:
    """One `invocations` entry rebuilt from an older manifest's top-level fields."""
    env = prior.get("environment") or {}
    status = prior.get("status")
    return dict(started=prior.get("started"), finished=prior.get("finished"),
                wall_s=prior.get("wall_s_total", prior.get("wall_s")),
                status=KILLED if status == "running" else status, command=prior.get("command"),
                git_commit=env.get("git_commit"), device_name=env.get("device_name"),
                points_measured=prior.get("points_measured_this_run"),
                points_skipped=prior.get("points_skipped_already_done"),
                note="rebuilt from the manifest written before invocations were recorded; "
                     "it may cover several earlier calls")
