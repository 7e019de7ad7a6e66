#!/usr/bin/env bash
# `dvc plots show` as a browser without network sees it: render the page DVC writes in
# headless Chromium with every network fetch refused (a proxy that does not exist), count
# the Vega charts that drew (a <canvas> or <svg> inside each vega-embed div) and save a
# screenshot. Evidence for issue 39 item 6; not part of the test run (needs Chromium:
# Debian's `chromium` package).
#   scripts/plots_screenshot.sh [OUT.png]      (default docs/plots_offline.png)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/plots_offline.png}"
browser="$(command -v chromium || command -v chromium-browser || true)"
[ -n "$browser" ] || { echo "error: no chromium on PATH (apt-get install chromium)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
.venv/bin/dvc plots show -o "$work/plots" > /dev/null
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --proxy-server=127.0.0.1:9
       --proxy-bypass-list='<-loopback>' --virtual-time-budget=15000)
"$browser" "${flags[@]}" --dump-dom "file://$work/plots/index.html" 2> /dev/null > "$work/dom.html"
python3 - "$work/plots/index.html" "$work/dom.html" <<'PY'
import re, sys
charts = open(sys.argv[1], encoding="utf8").read().count("vegaEmbed(")
embeds = open(sys.argv[2], encoding="utf8").read().split('class="vega-embed')[1:]
drawn = sum(bool(re.search(r"<(canvas|svg)\b", e)) for e in embeds)
print(f"vega charts drawn offline: {drawn} of {charts}")
sys.exit(0 if charts and drawn == charts else 1)
PY
"$browser" "${flags[@]}" --window-size=1280,2400 --screenshot="$out" "file://$work/plots/index.html" 2> /dev/null
echo "screenshot: $out"
