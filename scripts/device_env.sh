# Sourced by the device scripts (scripts/h200_*.sh): the amd-aiter wheel from .whl/ into
# /tmp/site (no index on the device machine), the working tree on the path, the bundle
# folders under $OUT, and the lease's STAMP (the first lease's YYYYMMDD, for resuming).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
B=$OUT/bundle; mkdir -p $B/runs $B/logs $B/checks
STAMP=${STAMP:-$(date -u +%Y%m%d)}
