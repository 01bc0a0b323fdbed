#!/usr/bin/env bash
# The operations kit under deploy/ [X1], checked without running it (test_prometheus.sh runs it):
# promtool accepts the scrape config and the rules and passes the rules' unit tests; the Grafana
# dashboard is valid JSON whose every query parses and names only metrics that shoal exports (or
# the rules record); every alert is tested and documented; the example environment files use
# only flags that `shoal serve` / `shoal mount` know; `systemd-analyze verify` accepts both units.
#
# What this cannot check: the units under a running systemd (CI has no systemd as PID 1), and
# the dashboard inside Grafana (not packaged in Debian): only its JSON and its queries.
. "$(dirname "$0")/lib.sh"
command -v promtool >/dev/null || skip "no promtool (scripts/setup.sh installs Debian's prometheus)"
/usr/bin/python3 -c 'import yaml' 2>/dev/null || skip "no python3-yaml (scripts/setup.sh installs it)"
D=$SRC/deploy
CHECK="/usr/bin/python3 $SRC/tests/integration/deploy_check.py"

echo "== promtool: scrape config, rules, rule unit tests"
cp -r "$D/prometheus" "$T/prom"
promtool check config "$T/prom/prometheus.yml" >"$T/pt.out" 2>&1 || fail "promtool check config: $(cat "$T/pt.out")"
promtool check rules "$T/prom/shoal.rules.yml" >"$T/pt.out" 2>&1 || fail "promtool check rules: $(cat "$T/pt.out")"
(cd "$T/prom" && promtool test rules shoal.rules.test.yml) >"$T/pt.out" 2>&1 ||
  fail "promtool test rules: $(cat "$T/pt.out")"
grep -q SUCCESS "$T/pt.out" || fail "promtool test rules: $(cat "$T/pt.out")"
echo "  $(grep -c 'alertname:' "$D/prometheus/shoal.rules.test.yml") alert cases pass"

echo "== dashboard and rules: JSON, metric names, tests and docs for every alert"
$CHECK check "$SRC" "$T/dashboard.rules.yml" || fail "deploy_check"
promtool check rules "$T/dashboard.rules.yml" >"$T/pt.out" 2>&1 ||
  fail "a dashboard query does not parse: $(cat "$T/pt.out")"
# The check itself must catch a metric that does not exist.
sed 's/"blockcache_bytes{/"blockcache_bytez{/' "$D/grafana/shoal.json" >"$T/bad.json"
mkdir -p "$T/bad/deploy/grafana" "$T/bad/src/metrics" "$T/bad/docs"
cp -r "$D/prometheus" "$T/bad/deploy/"
cp "$T/bad.json" "$T/bad/deploy/grafana/shoal.json"
cp "$SRC/src/metrics/metrics.h" "$T/bad/src/metrics/"
cp "$SRC/docs/operations.md" "$T/bad/docs/"
! $CHECK check "$T/bad" "$T/bad.rules.yml" >"$T/bad.out" || fail "a misspelt metric passed"
grep -q "unknown metric blockcache_bytez" "$T/bad.out" || fail "misspelt metric: $(cat "$T/bad.out")"

echo "== example environment files use flags the commands know"
for pair in serve:serve.env.example mount:mount.env.example; do
  cmd=${pair%%:*}
  env=$D/systemd/${pair#*:}
  "$SHOAL" "$cmd" --help >"$T/help.txt" 2>&1 || fail "shoal $cmd --help"
  flags=$(grep -o -- '--[a-z-]*' <(grep '^SHOAL_FLAGS=' "$env"))
  [ -n "$flags" ] || fail "$env has no flags"
  for f in $flags; do
    grep -q -- " $f " "$T/help.txt" || fail "$env: shoal $cmd has no flag $f"
  done
  $CHECK exec "$D/systemd/shoal-$cmd$([ "$cmd" = mount ] && echo @).service" "$env" >"$T/argv" ||
    fail "cannot expand the ExecStart of shoal-$cmd"
  [ "$(tr '\0' '\n' <"$T/argv" | head -n 2 | xargs)" = "/usr/local/bin/shoal $cmd" ] ||
    fail "ExecStart of shoal-$cmd: $(tr '\0' ' ' <"$T/argv")"
  echo "  $cmd: $(echo $flags | wc -w) flags known"
done

echo "== logrotate: the shipped file parses (test_sighup.sh runs it)"
if command -v logrotate >/dev/null; then
  logrotate -d -s "$T/lr.state" "$D/logrotate/shoal" >"$T/lr.out" 2>&1 ||
    fail "logrotate -d: $(cat "$T/lr.out")"
  grep -qiE "^error" "$T/lr.out" && fail "logrotate -d: $(grep -iE '^error' "$T/lr.out")"
  grep -q "kill-whom=main --signal=HUP shoal-serve.service 'shoal-mount@\*.service'" "$D/logrotate/shoal" ||
    fail "the logrotate file does not signal both units"
  echo "  deploy/logrotate/shoal parses"
else
  skip_section "no logrotate (scripts/setup.sh installs it)"
fi

echo "== fixed metrics ports: the units' --metrics are the ports targets/local.yml scrapes"
want=$(grep -o "127.0.0.1:[0-9]*" "$D/prometheus/targets/local.yml" | cut -d: -f2 | sort | xargs)
have=$(grep -ho -- "--metrics [0-9.]*:[0-9]*" "$D/systemd/serve.env.example" "$D/systemd/mount.env.example" |
  cut -d: -f2 | sort | xargs)
[ -n "$want" ] && [ "$want" = "$have" ] || fail "targets/local.yml scrapes '$want', the units listen on '$have'"
echo "  ports $have"

echo "== systemd-analyze verify"
if command -v systemd-analyze >/dev/null; then
  mkdir -p "$T/units"
  # verify checks that ExecStart's binary exists: point the copies at the one just built.
  sed "s|/usr/local/bin/shoal|$SHOAL|" "$D/systemd/shoal-serve.service" >"$T/units/shoal-serve.service"
  sed "s|/usr/local/bin/shoal|$SHOAL|" "$D/systemd/shoal-mount@.service" >"$T/units/shoal-mount@data.service"
  (cd "$T/units" && systemd-analyze verify shoal-serve.service shoal-mount@data.service) \
    >"$T/sd.out" 2>&1 || fail "systemd-analyze verify: $(cat "$T/sd.out")"
  # It exits 0 on unknown keys or bad values, with a warning: any output is a failure.
  [ ! -s "$T/sd.out" ] || fail "systemd-analyze verify: $(cat "$T/sd.out")"
  echo "  both units verified"
else
  skip_section "no systemd-analyze (Debian package systemd, in scripts/setup.sh): units not verified"
fi
echo "PASS"
