#!/usr/bin/env bash
# Regenerate the screenshots docs/viewer.md shows: the viewer's browser tests take them.
# Needs chromium (apt-get install chromium) and the dev install (.venv, as .ci/run builds it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
SESSIONSTORE_VIEWER_SCREENSHOTS="$PWD/docs/viewer" SESSIONSTORE_REQUIRE_BROWSER=1 \
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_serve_browser.py
