#!/usr/bin/env bash
# Checks deploy/grafana/cgpkit-coordinator.json against a real coordinator: every metric a panel
# (or a template variable) asks for is one that `cgp-coordinator serve --metrics-listen` exports.
# Starts a coordinator with 3 enrolled devices, a swarm of them (cgp-device-swarm) and one
# analyst range query (cgp-analyst), so that the per-query metrics (cgp_queries_total,
# cgp_query_duration_seconds), which appear only after a query, are in the scrape too. Also
# fails if the dashboard is not JSON, has no panel or no expression, or a panel's datasource is
# not the ${DS_PROMETHEUS} template variable.
#   tests/grafana_dashboard_check.sh CGP_COORDINATOR REPO_ROOT [DASHBOARD]
# cgp-analyst and cgp-device-swarm are taken from beside CGP_COORDINATOR (or $CGP_ANALYST,
# $CGP_DEVICE_SWARM).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 CGP_COORDINATOR REPO_ROOT [DASHBOARD]" >&2; exit 2; }
coordinator="$1"
root="$2"
dashboard="${3:-$root/deploy/grafana/cgpkit-coordinator.json}"
bin="$(dirname "$coordinator")"
analyst="${CGP_ANALYST:-$bin/cgp-analyst}"
swarm="${CGP_DEVICE_SWARM:-$bin/cgp-device-swarm}"
fail() { echo "grafana_dashboard_check: $*" >&2; exit 1; }
for program in "$coordinator" "$analyst" "$swarm"; do
  [ -x "$program" ] || fail "no program at $program"
done
[ -f "$dashboard" ] || fail "no dashboard at $dashboard"

work="$(mktemp -d)"
server=""
devices=""
cleanup() {
  for pid in $devices $server; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# 1. A coordinator on loopback ports of its choosing (:0), read back from its listening line.
"$coordinator" credential --out "$work/analyst.key" >/dev/null
"$coordinator" enrol --devices "$work/devices.csv" --count 3 --secrets-out "$work/secrets.csv" \
  >/dev/null
"$coordinator" serve --listen 127.0.0.1:0 --devices "$work/devices.csv" \
  --analyst-credential "$work/analyst.key" --no-state --deadline-ms 3000 \
  --metrics-listen 127.0.0.1:0 2> "$work/serve.log" &
server=$!
: >> "$work/serve.log"  # grep may look before the coordinator's shell opened it
scrape() {
  python3 - "$1" "$2" <<'PY'
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=2) as response:
    open(sys.argv[2], "wb").write(response.read())
PY
}
deadline=$((SECONDS + 20))
port="" metrics_port=""
while [ -z "$metrics_port" ]; do
  [ "$SECONDS" -lt "$deadline" ] || { cat "$work/serve.log" >&2; fail "the coordinator did not start"; }
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; fail "the coordinator exited"; }
  line="$(grep -m1 'event=listening' "$work/serve.log" || true)"
  if [[ "$line" =~ \ port=([0-9]+)\  ]]; then port="${BASH_REMATCH[1]}"; fi
  if [[ "$line" =~ \ metrics_port=([0-9]+) ]]; then metrics_port="${BASH_REMATCH[1]}"; fi
  [ -n "$metrics_port" ] || sleep 0.1
done
if [ -z "$port" ] || [ "$metrics_port" = 0 ]; then fail "no ports in: $line"; fi
url="http://127.0.0.1:$metrics_port/metrics"

# 2. Three devices connect; one query runs.
"$swarm" --coordinator "127.0.0.1:$port" --count 3 --secrets "$work/secrets.csv" \
  > "$work/swarm.log" 2>&1 &
devices=$!
until scrape "$url" "$work/metrics.txt" 2>/dev/null \
    && grep -qx 'cgp_devices_connected 3' "$work/metrics.txt"; do
  [ "$SECONDS" -lt "$deadline" ] || { cat "$work/serve.log" "$work/swarm.log" >&2; fail "3 devices did not connect within 20 s"; }
  kill -0 "$devices" 2>/dev/null || { cat "$work/swarm.log" >&2; fail "the swarm exited"; }
  sleep 0.2
done
"$analyst" --coordinator "127.0.0.1:$port" --credential "$work/analyst.key" \
  range --box -1000,-1000,1000,1000 > "$work/query.json" 2> "$work/query.log" \
  || { cat "$work/query.log" "$work/serve.log" >&2; fail "the analyst query failed"; }
scrape "$url" "$work/metrics.txt" || fail "GET $url failed"

# 3. The dashboard's metrics against the scrape.
python3 - "$dashboard" "$work/metrics.txt" <<'PY'
import json, re, sys

dashboard_path, metrics_path = sys.argv[1], sys.argv[2]
errors = []

# Exported names: every sample's name, and every family's from its # TYPE line; a histogram
# family's base name stands for its _bucket/_sum/_count series.
exported, types = set(), {}
for line in open(metrics_path, encoding="utf-8"):
    line = line.strip()
    if line.startswith("# TYPE "):
        parts = line.split()
        if len(parts) >= 4:
            types[parts[2]] = parts[3]
    elif line and not line.startswith("#"):
        exported.add(re.match(r"[^{\s]+", line).group(0))
for name, kind in types.items():
    if kind == "histogram" and all(name + s in exported for s in ("_bucket", "_sum", "_count")):
        exported.add(name)
    elif kind != "histogram":
        exported.add(name)
if not exported:
    sys.exit("grafana_dashboard_check: the coordinator exported no metric")

try:
    dashboard = json.load(open(dashboard_path, encoding="utf-8"))
except (OSError, ValueError) as e:
    sys.exit("grafana_dashboard_check: %s is not valid JSON: %s" % (dashboard_path, e))

FUNCTIONS = set("""abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil
changes clamp clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year
days_in_month deg delta deriv exp floor histogram_count histogram_fraction histogram_quantile
histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase irate
label_join label_replace last_over_time ln log10 log2 mad_over_time max_over_time min_over_time
minute month pi predict_linear present_over_time quantile_over_time rad rate resets round scalar
sgn sin sinh sort sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh time
timestamp vector year sum min max avg group stddev stdvar count count_values bottomk topk
quantile label_values""".split())
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                "bottomk", "topk", "quantile"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan", "atan2"}
TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`|\$\{[^}]*\}|\$\w+'
                   r'|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|[A-Za-z_:][A-Za-z0-9_:]*|\S')

def metric_names(expr, where):
    """Every identifier in expr that is neither a function, a keyword, a label name nor
    inside a matcher or range: the metric names. An unknown function is an error."""
    tokens = [t for t in TOKEN.findall(expr)]
    names, depth_brace, depth_bracket, skip_group = [], 0, 0, False
    paren_stack = []
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok == "{": depth_brace += 1; continue
        if tok == "}": depth_brace -= 1; continue
        if tok == "[": depth_bracket += 1; continue
        if tok == "]": depth_bracket -= 1; continue
        if tok == "(":
            paren_stack.append(skip_group); skip_group = False; continue
        if tok == ")":
            paren_stack and paren_stack.pop(); continue
        if depth_brace and tok == "__name__":  # {__name__="..."}: a metric name too
            if tokens[i + 1:i + 2] == ["="] and tokens[i + 2:i + 3] and tokens[i + 2][0] in "\"'`" \
                    and tokens[i + 3:i + 4] != ["~"]:
                names.append(tokens[i + 2][1:-1])
            else:
                errors.append("%s: a __name__ matcher other than = in: %s" % (where, expr))
            continue
        if depth_brace or depth_bracket or (paren_stack and paren_stack[-1]):
            continue  # label names and values, durations, grouping labels
        if not re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", tok):
            continue
        if tok in KEYWORDS:
            if tok in ("by", "without", "on", "ignoring", "group_left", "group_right") and nxt == "(":
                skip_group = True  # the next ( ... ) holds label names
            continue
        if nxt in ("by", "without") and tok in AGGREGATIONS:
            continue  # sum by (label) (...)
        if nxt == "(":
            if tok not in FUNCTIONS:
                errors.append("%s: unknown function %s() in: %s" % (where, tok, expr))
            continue
        names.append(tok)
    if depth_brace or depth_bracket or paren_stack:
        errors.append("%s: unbalanced brackets in: %s" % (where, expr))
    return names

def panels_of(items):
    for panel in items:
        yield panel
        yield from panels_of(panel.get("panels", []))

def is_template_ds(ds):
    return ds == "${DS_PROMETHEUS}" or (isinstance(ds, dict) and ds.get("uid") == "${DS_PROMETHEUS}")

variables = dashboard.get("templating", {}).get("list", [])
if not any(v.get("name") == "DS_PROMETHEUS" and v.get("type") == "datasource"
           and v.get("query") == "prometheus" for v in variables):
    errors.append("no datasource template variable DS_PROMETHEUS of type prometheus")

checked = {}  # metric name -> first place it is used
exprs = 0
panels = list(panels_of(dashboard.get("panels", [])))
plotting = [p for p in panels if p.get("type") != "row"]
for panel in panels:
    where = "panel %r" % panel.get("title", panel.get("id"))
    if panel.get("type") == "row":
        if panel.get("datasource") is not None and not is_template_ds(panel["datasource"]):
            errors.append("%s: datasource is not ${DS_PROMETHEUS}" % where)
        continue
    if not is_template_ds(panel.get("datasource")):
        errors.append("%s: datasource %r is not ${DS_PROMETHEUS}" % (where, panel.get("datasource")))
    targets = panel.get("targets") or []
    if not any((t.get("expr") or "").strip() for t in targets):
        errors.append("%s: no expression" % where)
    for target in targets:
        if "datasource" in target and not is_template_ds(target["datasource"]):
            errors.append("%s: target %s datasource is not ${DS_PROMETHEUS}" % (where, target.get("refId")))
        expr = (target.get("expr") or "").strip()
        if not expr:
            continue
        exprs += 1
        for name in metric_names(expr, where):
            checked.setdefault(name, where)
for variable in variables:
    if variable.get("type") != "query":
        continue
    where = "variable %r" % variable.get("name")
    if not is_template_ds(variable.get("datasource")):
        errors.append("%s: datasource is not ${DS_PROMETHEUS}" % where)
    query = variable.get("query")
    query = query.get("query", "") if isinstance(query, dict) else (query or "")
    m = re.fullmatch(r"\s*label_values\(\s*(.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*", query)
    inner = m.group(1) if m else query
    for name in metric_names(inner, where):
        checked.setdefault(name, where)

if not plotting:
    errors.append("the dashboard has no panel")
if exprs == 0:
    errors.append("the dashboard has no expression")
for name, where in sorted(checked.items()):
    if name not in exported:
        errors.append("%s: metric %s is not exported by the coordinator" % (where, name))
if errors:
    for e in errors:
        print("grafana_dashboard_check: " + e, file=sys.stderr)
    print("grafana_dashboard_check: exported: " + " ".join(sorted(exported)), file=sys.stderr)
    sys.exit(1)
suffixes = ("_bucket", "_sum", "_count")
unplotted = sorted(n for n in exported if n not in checked
                   and not any(n == b + s or b == n + s for b in checked for s in suffixes))
print("dashboard: %d panels, %d expressions, %d metrics checked against a live coordinator"
      % (len(plotting), exprs, len(checked)))
if unplotted:
    print("dashboard: exported but not plotted: " + " ".join(unplotted))
PY
