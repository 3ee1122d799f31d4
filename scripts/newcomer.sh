#!/usr/bin/env bash
# The README's first steps on a machine with no PostgreSQL at all: a copy of this checkout
# without .data/ or dist/, run inside a network namespace of its own, where nothing answers
# on 127.0.0.1:5432. It starts the service (`npm start`, so embedded PGlite), bootstraps a
# key while it runs, makes the README's calls and a test delivery to a local HTTPS receiver,
# waits 31 s (longer than every idle timeout of the pools), and does it all again; then the
# README's connection walkthrough (start, approve, complete, confirm, disable) and an internal
# publish, first and again, whose delivery arrives signed. Every process it starts is stopped
# on exit, also when a check fails. Needs root (ip netns).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

if [ "${1:-}" != "--inside" ]; then
  # Node, dependencies and generated code come first, while the registry is reachable.
  "$root/scripts/with-node.sh" true
  namespace="newcomer-$$"
  ip netns add "$namespace"
  trap 'ip netns delete "$namespace"' EXIT
  ip netns exec "$namespace" ip link set lo up
  ip netns exec "$namespace" timeout 180 "$0" --inside
  exit 0
fi

work="$(mktemp -d)"
service_pid=""
receiver_pid=""
idle_pid=""
stop_all() {
  if [ -n "$idle_pid" ]; then kill "$idle_pid" 2>/dev/null || true; fi
  # Each was started in a process group of its own (setsid); the group goes with all its children.
  for pid in $service_pid $receiver_pid; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for pid in $service_pid $receiver_pid; do
    for _ in $(seq 1 100); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap stop_all EXIT
# A signal (the outer timeout, say) ends the script through its EXIT trap too.
trap 'exit 1' TERM INT

fail() {
  echo "newcomer: FAILED: $*" >&2
  echo "--- service log (last 40 lines)" >&2
  tail -n 40 "$work/service.log" >&2 || true
  exit 1
}

if (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then fail "something answers on 127.0.0.1:5432"; fi

# A fresh checkout: the working tree without .data/ and dist/, sharing the installed Node and modules.
checkout="$work/checkout"
mkdir "$checkout"
(cd "$root" && tar --exclude=./node_modules --exclude=./.tools --exclude=./.data --exclude=./dist --exclude=./.git -cf - .) | (cd "$checkout" && tar -xf -)
ln -s "$root/node_modules" "$checkout/node_modules"
ln -s "$root/.tools" "$checkout/.tools"
cd "$checkout"

# The receiver: HTTPS on 127.0.0.1 with a self-signed certificate the service is told to trust.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" -days 1 \
  -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost 2>/dev/null
mkdir "$work/received"
cat > "$work/receiver.js" <<'JS'
const fs = require('node:fs');
const https = require('node:https');
const [key, cert, dir] = process.argv.slice(2);
let n = 0;
https.createServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert) }, (req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    n += 1;
    fs.writeFileSync(`${dir}/${n}.body`, Buffer.concat(chunks));
    fs.writeFileSync(`${dir}/${n}.headers`, JSON.stringify(req.headers));
    // Written last: its presence says the request is complete.
    fs.writeFileSync(`${dir}/${n}.done`, '');
    res.end('ok');
  });
}).listen(8443, '127.0.0.1', () => fs.writeFileSync(`${dir}/listening`, ''));
JS
setsid scripts/with-node.sh node "$work/receiver.js" "$work/key.pem" "$work/cert.pem" "$work/received" >"$work/receiver.log" 2>&1 &
receiver_pid=$!

INTERNAL_TOKEN="newcomer-$(openssl rand -hex 16)"
DELIVERY_EXTRA_CA_PEM="$(cat "$work/cert.pem")" DELIVERY_ALLOW_CIDRS=127.0.0.0/8 INTERNAL_SERVICE_TOKENS="scheduler:$INTERNAL_TOKEN" \
  setsid npm start >"$work/service.log" 2>&1 &
service_pid=$!

wait_for() { # what, seconds, command...
  local what="$1" seconds="$2"
  shift 2
  for _ in $(seq 1 $((seconds * 10))); do
    if "$@"; then return 0; fi
    kill -0 "$service_pid" 2>/dev/null || fail "the service exited while waiting for $what"
    sleep 0.1
  done
  fail "timed out after ${seconds}s waiting for $what"
}
wait_for "the service to be ready" 60 curl -sf -o /dev/null localhost:8080/readyz
wait_for "the receiver" 10 test -f "$work/received/listening"
grep -q 'using embedded PGlite' "$work/service.log" || fail "the service did not say it uses embedded PGlite"

# status METHOD PATH [BODY]: prints the HTTP status; the body goes to $work/answer.json.
call() {
  local body=()
  if [ $# -ge 3 ]; then body=(-H 'content-type: application/json' -d "$3"); fi
  curl -s -o "$work/answer.json" -w '%{http_code}' -X "$1" "localhost:8080$2" -H "Authorization: Bearer $KEY" "${body[@]}"
}
expect_status() { # expected, METHOD, PATH, [BODY]
  local expected="$1" got
  shift
  got="$(call "$@")"
  [ "$got" = "$expected" ] || fail "$1 $2 answered $got, expected $expected: $(cat "$work/answer.json")"
}
# field PATH: the last answer's field (dot-separated path); empty when absent, as proto3 JSON leaves false, 0 and "" out.
field() { scripts/with-node.sh node -e 'let v=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));for(const k of process.argv[2].split("."))v=v?.[k];process.stdout.write(v==null?"":String(v))' "$work/answer.json" "$1"; }

# expect_field PATH VALUE: the last answer's field PATH (dot-separated) is VALUE.
expect_field() {
  local got
  got="$(field "$1")"
  [ "$got" = "$2" ] || fail "the answer's $1 is \"$got\", expected \"$2\": $(cat "$work/answer.json")"
}

# A delivery of type $3 (default webhook.test) arrives as request number $1, signed with the endpoint's secret $2.
expect_signed_delivery() {
  wait_for "delivery $1 at the receiver" 30 test -f "$work/received/$1.done"
  local headers="$work/received/$1.headers" ts signature expected
  ts="$(scripts/with-node.sh node -p 'JSON.parse(require("fs").readFileSync(process.argv[1]))["x-service-timestamp"]' "$headers")"
  signature="$(scripts/with-node.sh node -p 'JSON.parse(require("fs").readFileSync(process.argv[1]))["x-service-signature"]' "$headers")"
  expected="$({ printf '%s.' "$ts"; cat "$work/received/$1.body"; } | openssl dgst -sha256 -hmac "$2" -r | cut -d' ' -f1)"
  [ "$signature" = "$expected" ] || fail "delivery $1 is not signed with the endpoint's secret"
  grep -q "\"type\":\"${3:-webhook.test}\"" "$work/received/$1.body" || fail "delivery $1 is not a ${3:-webhook.test}: $(cat "$work/received/$1.body")"
}

# The README's "Connecting an account in development", without a browser: each step's answer
# and the platform events its changes recorded (the publish statement on the embedded database).
walkthrough() {
  expect_status 200 POST /api/v1/webhooks '{"url":"https://hooks.example.com/platform","eventNames":["connection.verified","connection.disconnected"]}'
  local platform_endpoint redirect state location account id
  platform_endpoint="$(field endpoint.id)"
  expect_status 200 POST /api/v1/connections/start '{"toolkit":"instagram"}'
  redirect="$(field redirectUrl)"
  state="$(field state)"
  [ -n "$state" ] || fail "connections/start gave no state"
  location="$(curl -s -o /dev/null -w '%{redirect_url}' "${redirect/consent?/consent/approve?}&account=bakery")"
  account="$(printf '%s' "$location" | sed -n 's/.*[?&]connected_account_id=\([^&]*\).*/\1/p')"
  [[ "$account" == sbx.instagram.bakery.* ]] || fail "the sandbox approval redirected to \"$location\", with no bakery account"
  curl -sf -o /dev/null "$location" || fail "the callback page $location did not answer"
  expect_status 200 POST /api/v1/connections/complete "{\"state\":\"$state\",\"connectedAccountId\":\"$account\"}"
  expect_field connection.status connected
  expect_field connection.identity.displayName "Sandbox Bakery"
  id="$(field connection.id)"
  expect_status 200 POST "/api/v1/connections/$id/confirm" '{"confirmIdentity":true}'
  expect_field connection.status verified
  expect_field connection.id "$id"
  expect_status 200 POST "/api/v1/connections/$id/disable" '{"reason":"newcomer walkthrough"}'
  expect_field connection.status disconnected
  expect_status 200 GET /api/v1/webhooks
  scripts/with-node.sh node -e '
    const { endpoints } = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const types = endpoints.find((e) => e.id === process.argv[2]).recentDeliveries.map((d) => d.eventType).sort().join(",");
    if (types !== "connection.disconnected,connection.verified") { console.error(types); process.exit(1); }' "$work/answer.json" "$platform_endpoint" \
    || fail "confirm and disable did not record connection.verified and connection.disconnected: $(cat "$work/answer.json")"
}

# publish BODY: EventService/PublishEvent over Connect (JSON) with the internal credential.
publish() {
  local got
  got="$(curl -s -o "$work/answer.json" -w '%{http_code}' -X POST localhost:8080/publishing.internal.v1.EventService/PublishEvent \
    -H "Authorization: Bearer $INTERNAL_TOKEN" -H 'content-type: application/json' -d "$1")"
  [ "$got" = 200 ] || fail "PublishEvent answered $got: $(cat "$work/answer.json")"
}

round() { # $1: the number of deliveries the receiver has had before this round
  expect_status 200 GET /api/v1/connections
  expect_status 200 POST /api/v1/connections/start '{"toolkit":"instagram"}'
  [ -n "$(field redirectUrl)" ] || fail "connections/start gave no redirectUrl"
  expect_status 422 POST /api/v1/connections/start '{"toolkit":"tiktok"}'
  expect_status 200 POST /api/v1/webhooks '{"url":"https://hooks.example.com/in","eventNames":["webhook.test"]}'
  expect_status 200 POST /api/v1/webhooks '{"url":"https://127.0.0.1:8443/in","eventNames":["webhook.test"]}'
  local endpoint secret
  endpoint="$(field endpoint.id)"
  secret="$(field signingSecret)"
  expect_status 200 POST "/api/v1/webhooks/$endpoint/test"
  expect_signed_delivery $(($1 + 1)) "$secret"
  expect_status 200 GET /api/v1/webhooks
}

# While the service runs, the CLI reaches the service's database, so its key works there.
# bootstrap: a new key of the development organization's owner, as KEY and ORG.
bootstrap() {
  npm run --silent admin -- bootstrap 2>"$work/admin.log" >"$work/bootstrap.txt"
  KEY="$(sed -n 's/^apiKey: //p' "$work/bootstrap.txt")"
  ORG="$(sed -n 's/^organizationId: //p' "$work/bootstrap.txt")"
  [ -n "$KEY" ] && [ -n "$ORG" ] || fail "bootstrap printed no API key or organization: $(cat "$work/bootstrap.txt" "$work/admin.log")"
}
bootstrap
grep -q 'embedded PGlite served by another process' "$work/admin.log" || fail "bootstrap did not use the service's database"
round 0
echo "newcomer: first round passed; idle for 31 s"
# In the background, so a signal meanwhile is handled at once rather than after the sleep.
sleep 31 &
idle_pid=$!
wait "$idle_pid"
idle_pid=""
round 1
bootstrap
expect_status 200 GET /api/v1/connections
walkthrough
echo "newcomer: connection walkthrough passed"

# An internal service publishes an event its organization's endpoint subscribes to; the same
# event again records nothing and answers with the first delivery.
expect_status 200 POST /api/v1/webhooks '{"url":"https://127.0.0.1:8443/orders","eventNames":["order.shipped"]}'
order_endpoint="$(field endpoint.id)"
order_secret="$(field signingSecret)"
event='{"organizationId":"'"$ORG"'","eventId":"order-1","eventType":"order.shipped","payload":{"orderId":"1"}}'
publish "$event"
expect_field event.eventId order-1
expect_field event.publisher scheduler
expect_field event.replayed ""
expect_field event.deliveries.0.endpointId "$order_endpoint"
delivery="$(field event.deliveries.0.deliveryId)"
expect_signed_delivery 3 "$order_secret" order.shipped
publish "$event"
expect_field event.replayed true
expect_field event.deliveries.0.deliveryId "$delivery"
echo "newcomer: internal publish passed"

# A second service on the same .data is refused, naming the owner.
if PORT=8081 npm start >"$work/second.log" 2>&1; then fail "a second service opened the embedded database"; fi
grep -q 'is in use by process' "$work/second.log" || fail "the second service was refused without saying why: $(tail -3 "$work/second.log")"

kill -TERM -- "-$service_pid"
for _ in $(seq 1 200); do kill -0 -- "-$service_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 -- "-$service_pid" 2>/dev/null; then fail "the service did not stop within 20 s of SIGTERM"; fi
[ ! -e .data/pglite.lock ] || fail "the service left .data/pglite.lock behind"
service_pid=""
echo "newcomer: passed (no PostgreSQL; two rounds 31 s apart, deliveries signed; connection walkthrough; internal publish)"
