#!/usr/bin/env bash
# A real Prometheus scrapes shoal [V2, X1]: a member and a FUSE mount are started with the
# command lines of deploy/systemd's units; Debian's prometheus runs on loopback with the
# deploy/prometheus configuration (its own data dir here, a 1 s scrape interval), scrapes both,
# loads the alert rules and evaluates them without error; every metric the dashboard and the
# rules use exists in its database; counters queried back through /api/v1/query move by the
# bytes read through the mount.
. "$(dirname "$0")/lib.sh"
need_fuse
command -v prometheus >/dev/null || skip "no prometheus (scripts/setup.sh installs Debian's)"
/usr/bin/python3 -c 'import yaml' 2>/dev/null || skip "no python3-yaml (scripts/setup.sh installs it)"
export SHOAL_GROUP_TIMEOUT=3s SHOAL_GROUP_HEARTBEAT=200ms
D=$SRC/deploy
CHECK="/usr/bin/python3 $SRC/tests/integration/deploy_check.py"

STORE=$T/store
for i in $(seq 0 5); do make_object "$STORE/d/f$i" $((5 * 1024 * 1024 + i * 12345)); done
S="file://$STORE"
META="sqlite3://$T/meta.db"
MP=$T/mnt
mkdir -p "$MP"
AM=127.0.0.1:$(free_port)
AC=127.0.0.1:$(free_port)

# unit_argv UNIT ENV_FILE — the unit's ExecStart, expanded as systemd would, with the binary
# just built, into the array ARGV.
unit_argv() {
  $CHECK exec "$1" "$2" >"$T/argv" || fail "cannot expand the ExecStart of $1"
  mapfile -d '' ARGV <"$T/argv"
  [ "${ARGV[0]}" = /usr/local/bin/shoal ] || fail "$1 does not start /usr/local/bin/shoal"
  ARGV[0]=$SHOAL
}

echo "== a member and a mount, started as the systemd units start them"
cat >"$T/serve.env" <<EOF
SHOAL_STORAGE=$S
SHOAL_FLAGS=--cache-group gp --meta $META --group-ip 127.0.0.1 --cache-dir $T/m.cache --cache-size 1G --metrics $AM --log-file $T/m.log
EOF
unit_argv "$D/systemd/shoal-serve.service" "$T/serve.env"
"${ARGV[@]}" &
track m $! member "$T/m.log"
wait_members "$META" gp 1
cat >"$T/mount.env" <<EOF
SHOAL_STORAGE=$S
SHOAL_MOUNTPOINT=$MP
SHOAL_FLAGS=--cache-group gp --meta $META --no-sharing --cache-size 0 --metrics $AC --log-file $T/c.log
EOF
unit_argv "$D/systemd/shoal-mount@.service" "$T/mount.env"
MOUNTS+=("$MP")
# Type=forking: the command returns once the mount is up.
timeout 60 "${ARGV[@]}" || fail "the mount unit's command failed: $(tail -n 3 "$T/c.log")"
mountpoint -q "$MP" || fail "not mounted after the command returned"
# The daemon's pid is in its log lines ("shoal[PID]"), as systemd would guess it.
PID_c=$(grep -o 'shoal\[[0-9]*\]' "$T/c.log" | tail -n 1 | tr -dc 0-9)
[ -n "$PID_c" ] && kill -0 "$PID_c" || fail "no running mount daemon"
track c "$PID_c" daemon "$T/c.log"

echo "== Prometheus with deploy/prometheus, scraping both every second"
cp -r "$D/prometheus" "$T/prom"
sed -i 's/^\(  *\)scrape_interval: 15s/\1scrape_interval: 1s/; s/^\(  *\)evaluation_interval: 15s/\1evaluation_interval: 1s/' \
  "$T/prom/prometheus.yml"
grep -q 'scrape_interval: 1s' "$T/prom/prometheus.yml" || fail "could not shorten the scrape interval"
rm -f "$T/prom/targets/"*.yml
printf -- "- targets: ['%s', '%s']\n" "$AM" "$AC" >"$T/prom/targets/test.yml"
PP=$(free_port)
PROM=http://127.0.0.1:$PP
prometheus --config.file="$T/prom/prometheus.yml" --storage.tsdb.path="$T/prom-data" \
  --web.listen-address="127.0.0.1:$PP" --log.level=warn >"$T/prom.log" 2>&1 &
track prom $! infra "$T/prom.log"
PID_p=$PID_prom
wait_for curl -sf "$PROM/-/ready" || fail "prometheus did not start: $(tail -n 5 "$T/prom.log")"

# q EXPR — the instant query's result as "labels value" lines (sorted); fails on an API error.
q() {
  curl -sf --get "$PROM/api/v1/query" --data-urlencode "query=$1" >"$T/q.json" ||
    fail "query $1 failed"
  /usr/bin/python3 - "$T/q.json" <<'PY' || fail "query $1: $(cat "$T/q.json")"
import json, sys
d = json.load(open(sys.argv[1]))
if d["status"] != "success" or d["data"]["resultType"] != "vector":
    sys.exit(1)
for r in sorted(d["data"]["result"], key=lambda r: sorted(r["metric"].items())):
    m = r["metric"]
    print(",".join("%s=%s" % kv for kv in sorted(m.items())), r["value"][1])
PY
}
# num EXPR — the value of a query with exactly one result.
num() {
  q "$1" >"$T/q.out"
  [ "$(wc -l <"$T/q.out")" -eq 1 ] || fail "$1: want one result, got: $(cat "$T/q.out")"
  awk '{print $NF}' "$T/q.out"
}
targets_up() { [ "$(q 'sum(up{job="shoal"})' | awk '{print $NF}')" = 2 ]; }
wait_for targets_up || fail "prometheus does not scrape both targets: $(curl -s "$PROM/api/v1/targets" | head -c 1500)"
q 'up{job="shoal"}'

echo "== counters move after reads, as Prometheus stores them"
fuse0=$(num 'fuse_read_bytes{role="Consumer"}')
serve0=$(num 'remotecache_serve_bytes{role="Provider"}')
total=0
for i in $(seq 0 5); do
  cmp -s "$MP/d/f$i" "$STORE/d/f$i" || fail "d/f$i differs through the mount"
  total=$((total + $(stat -c %s "$STORE/d/f$i")))
done
moved() {
  local f s
  f=$(num 'fuse_read_bytes{role="Consumer"}')
  s=$(num 'remotecache_serve_bytes{role="Provider"}')
  [ "${f%.*}" -ge $((${fuse0%.*} + total)) ] && [ "${s%.*}" -ge $((${serve0%.*} + total)) ]
}
wait_for moved || fail "counters did not move by $total bytes: fuse_read_bytes $fuse0 -> $(num 'fuse_read_bytes{role="Consumer"}'), remotecache_serve_bytes $serve0 -> $(num 'remotecache_serve_bytes{role="Provider"}')"
echo "  read $total bytes: fuse_read_bytes $fuse0 -> $(num 'fuse_read_bytes{role="Consumer"}'), remotecache_serve_bytes $serve0 -> $(num 'remotecache_serve_bytes{role="Provider"}')"
rate=$(num 'sum(rate(remotecache_tcp_get_bytes{role="Consumer"}[1m]))')
python3 -c "import sys; sys.exit(0 if float('$rate') > 0 else 1)" || fail "rate() of the mount's pool reads is $rate"
echo "  rate(remotecache_tcp_get_bytes[1m]) = $rate"

echo "== histograms: histogram_quantile over the _bucket series"
hq='histogram_quantile(0.9, sum by (le) (rate(remotecache_serve_dur_bucket{role="Provider"}[1m])))'
p90=$(num "$hq")
python3 -c "import math, sys; v = float('$p90'); sys.exit(0 if v > 0 and math.isfinite(v) else 1)" ||
  fail "$hq = $p90"
echo "  $hq = $p90 s"

echo "== promtool check metrics: only the seed's names, which docs/operations.md lists"
curl -sf "http://$AM/metrics" >"$T/member.prom" || fail "no /metrics from the member"
set +e
promtool check metrics <"$T/member.prom" >"$T/lint.out" 2>&1
set -e
/usr/bin/python3 - "$T/lint.out" "$SRC/src/metrics/metrics.h" "$SRC/docs/operations.md" <<'PY' ||
import re, sys
lint = [l.strip() for l in open(sys.argv[1]) if l.strip()]
counters = set(re.findall(r"X\((\w+), COUNTER", open(sys.argv[2]).read()))
doc = open(sys.argv[3]).read()
kept = doc.split("**Names kept from the seed**", 1)
assert len(kept) == 2, "docs/operations.md has no 'Names kept from the seed' paragraph"
camel = set(re.findall(r"`(\w*[a-z][A-Z]\w*)`", kept[1].split("\n\n", 1)[0]))
bad = []
for l in lint:
    name, _, what = l.partition(" ")
    if what == 'counter metrics should have "_total" suffix' and name in counters:
        continue
    base = re.sub(r"_(tp50|tp90|tp99|max)$", "", name)
    if what.startswith("metric names should be written in 'snake_case'") and base in camel:
        continue
    bad.append(l)
print("  %d findings, all on the seed's names (%d counters, %d camelCase histograms)" % (
    len(lint), len(counters), len(camel)))
if bad:
    print("\n".join(bad))
    sys.exit(1)
PY
  fail "promtool check metrics found more than the seed's names"

echo "== the rules load and evaluate; every metric of the kit is in the database"
rules_ok() {
  curl -sf "$PROM/api/v1/rules" >"$T/rules.json" || return 1
  /usr/bin/python3 - "$T/rules.json" <<'PY'
import json, sys
groups = json.load(open(sys.argv[1]))["data"]["groups"]
rules = [r for g in groups for r in g["rules"]]
bad = [r["name"] for r in rules if r.get("health") != "ok"]
alerts = [r for r in rules if r["type"] == "alerting"]
if bad or len(alerts) < 9 or len(rules) < 13:
    sys.exit(1)
print("  %d rules in %d groups, all healthy; firing: %s" % (
    len(rules), len(groups), [a["name"] for a in alerts if a["state"] == "firing"] or "none"))
PY
}
wait_for rules_ok || fail "rules not loaded or unhealthy: $(head -c 2000 "$T/rules.json")"
rules_ok
# A recording rule has a value from the first evaluation after its rate() has two samples of
# each counter; "healthy" comes one evaluation earlier.
RATIO='shoal:remotecache_hit_ratio:rate5m{cache_group="gp"}'
ratio_recorded() { [ "$(q "$RATIO" | wc -l)" -eq 1 ]; }
wait_for ratio_recorded || fail "$RATIO was never recorded: $(q "$RATIO")"
ratio=$(num "$RATIO")
echo "  shoal:remotecache_hit_ratio:rate5m{cache_group=\"gp\"} = $ratio"
$CHECK names "$SRC" >"$T/names" || fail "deploy_check names"
curl -sf "$PROM/api/v1/label/__name__/values" >"$T/names.json" || fail "label values"
missing=$(/usr/bin/python3 -c '
import json, sys
have = set(json.load(open(sys.argv[1]))["data"])
print(" ".join(n for n in open(sys.argv[2]).read().split() if n not in have))' "$T/names.json" "$T/names")
[ -z "$missing" ] || fail "Prometheus has no series for: $missing"
echo "  all $(wc -l <"$T/names") metric names of the dashboard and the rules have series"

echo "== stop everything by PID"
kill -TERM "$PID_c"
for i in $(seq 1 200); do kill -0 "$PID_c" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$PID_c" 2>/dev/null || fail "the mount daemon did not end on SIGTERM"
! mountpoint -q "$MP" || fail "still mounted after SIGTERM"
kill -TERM "$PID_m"
wait_exit "$PID_m"
[ "$EXIT_RC" -eq 0 ] || fail "member exited with $EXIT_RC"
kill -TERM "$PID_p"
wait_exit "$PID_p" 30
[ "$EXIT_RC" -eq 0 ] || fail "prometheus exited with $EXIT_RC: $(tail -n 3 "$T/prom.log")"
echo "PASS"
