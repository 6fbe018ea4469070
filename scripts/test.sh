#!/usr/bin/env bash
# Run the test suite on a fresh machine: set up, then pytest. Exit 5 (no tests) is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
PY=${PYTHON:-python3}
set +e
# one worker per core (pytest-xdist); a module's tests stay on one worker (loadfile), so a
# module-scoped fixture (an executed notebook, a report) runs once; heavy modules first
"$PY" -m pytest -q -n "${MOE_LAB_TEST_WORKERS:-auto}" --dist loadfile "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then echo "test.sh: pytest collected no tests" >&2; exit 1; fi
exit $rc
