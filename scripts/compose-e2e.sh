#!/usr/bin/env bash
# The deploy kit under a real Docker engine: builds the images of deploy/Dockerfile, starts
# deploy/docker-compose.yml (PostgreSQL, the keys job, two controllers), runs the end-to-end suite
# (the compose `e2e` profile) against both controllers, then three faults:
#   1. `docker kill` of one controller in a burst of designations through both: the other keeps
#      answering, every accepted designation is stored, the chain verifies; the killed one starts
#      again and is healthy;
#   2. the database stopped and started again (`docker stop`/`docker start`, then `docker restart`):
#      `/readyz` is 503 on both while it is down, both recover without a restart of their own;
#   3. `docker-compose down` then `up`: the data and the keys are kept.
# Called by scripts/test.sh; runs alone too (as root: it installs packages and starts a daemon).
#
# What it uses, and leaves:
# - Debian's docker.io, containerd, runc, docker-compose (v1), debootstrap, jq and curl, installed
#   with apt-get when missing.
# - A private dockerd of its own (own --data-root, --exec-root and unix socket, no iptables, no
#   default bridge, overlay2); no other daemon or socket is touched.
# - No image registry is reachable here, so the base images are stand-ins built on this machine
#   under test-only tags, passed through the Dockerfile's build arguments and POSTGRES_IMAGE only:
#   a debootstrap (minbase) Debian bookworm for `debian:bookworm-slim`; the same with
#   build-essential, this machine's Rust toolchain and its CA bundle (CARGO_HTTP_CAINFO) for
#   `rust:1.95-bookworm`; the same with Debian's postgresql-15 and an entrypoint honouring
#   POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB for `postgres:15`. Users pull the official ones.
# - Kept for the next run, in $CLOUDLY_COMPOSE_E2E_STATE (default /var/lib/cloudly-compose-e2e):
#   the daemon's data root with the stand-in images and the build cache (trimmed to
#   $CLOUDLY_COMPOSE_E2E_CACHE_KEEP, default 20GB). Removed on success and on failure: the
#   containers, networks and volumes of the run, the project images it built, and the daemon.
#
# Every step prints its time; a failing step fails the script, naming the step.
set -euo pipefail
cd "$(dirname "$0")/.."

state=${CLOUDLY_COMPOSE_E2E_STATE:-/var/lib/cloudly-compose-e2e}
cache_keep=${CLOUDLY_COMPOSE_E2E_CACHE_KEEP:-20GB}
run_dir=/run/cloudly-compose-e2e
socket=$run_dir/docker.sock
project=cloudly-e2e
compose_file=deploy/docker-compose.yml
# Test-only tags of the stand-ins (the Dockerfile's and the compose file's defaults are the
# official images).
runtime_base=cloudly-e2e-standin/debian:bookworm-slim
builder_base=cloudly-e2e-standin/rust:1.95-bookworm
postgres_image=cloudly-e2e-standin/postgres:15
# The project images, as the compose file names them.
project_images=(cloudly:local cloudly-e2e:local)

# --- steps, timing, failure -------------------------------------------------------------------

script_started=$(date +%s)
step_name=""
step_started=0
timings=()
daemon_pid=""
scratch=""
holds_lock=""

log() { echo "compose-e2e: $*"; }

end_step() {
  if [ -n "$step_name" ]; then
    local took=$(($(date +%s) - step_started))
    timings+=("$(printf '%5d s  %s' "$took" "$step_name")")
    log "step '$step_name' done in ${took} s"
  fi
  step_name=""
}

step() {
  end_step
  step_name=$1
  step_started=$(date +%s)
  log "--- step '$step_name'"
}

# Fails the current step with a message naming it.
fail() {
  echo "compose-e2e: FAILED in step '${step_name:-setup}': $*" >&2
  exit 1
}

# Private daemon, private client configuration: nothing here reaches another daemon.
export DOCKER_HOST="unix://$socket"
export DOCKER_CONFIG="$run_dir/client-config"
unset DOCKER_CONTEXT DOCKER_TLS_VERIFY DOCKER_CERT_PATH
# Debian's client (the daemon's version, BuildKit built in, no buildx plugin needed).
docker_cli=/usr/bin/docker
docker() { "$docker_cli" "$@"; }
compose() {
  POSTGRES_IMAGE="$postgres_image" PUBLISH_ADDRESS=127.0.0.1 \
    CONTROLLER_1_PORT="$port_1" CONTROLLER_2_PORT="$port_2" \
    docker-compose --ansi never -p "$project" -f "$compose_file" "$@"
}

teardown() {
  local status=$?
  set +e
  if [ "$status" -ne 0 ]; then
    echo "compose-e2e: FAILED in step '${step_name:-setup}' (exit $status)" >&2
  fi
  end_step
  step "teardown"
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    if [ "$status" -ne 0 ] && [ -n "${port_1:-}" ]; then
      log "the containers' last log lines:"
      compose --profile e2e logs --no-color --tail=40 2>&1 | sed 's/^/  | /' | tail -n 200
    fi
    [ -n "${port_1:-}" ] && compose --profile e2e down --volumes --remove-orphans --timeout 10 2>&1 | sed 's/^/  | /'
    for image in "${project_images[@]}"; do
      docker image inspect "$image" >/dev/null 2>&1 && docker image rm --force "$image" >/dev/null
    done
    docker image prune --force >/dev/null
    docker builder prune --force --keep-storage "$cache_keep" >/dev/null
    local left
    left="$(docker ps -aq)$(docker volume ls -q)$(docker network ls -q --filter type=custom)"
    if [ -n "$left" ]; then
      echo "compose-e2e: teardown left containers, volumes or networks: $left" >&2
      [ "$status" -eq 0 ] && status=1
    fi
    kill -TERM "$daemon_pid"
    for _ in $(seq 1 60); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$daemon_pid" 2>/dev/null; then
      echo "compose-e2e: the private dockerd ($daemon_pid) did not stop in 30 s; killing it" >&2
      kill -KILL "$daemon_pid"
      [ "$status" -eq 0 ] && status=1
    fi
    wait "$daemon_pid" 2>/dev/null
  fi
  [ -n "$scratch" ] && rm -rf "$scratch"
  # The run directory is the lock holder's (another run's, while this one waits). A daemon that
  # did not stop cleanly can leave its mounts there (the host's network namespace).
  if [ -n "$holds_lock" ]; then
    awk -v dir="$run_dir/" 'index($2, dir) == 1 {print $2}' /proc/mounts | sort -r | xargs -r umount
    rm -rf "$run_dir" || { echo "compose-e2e: cannot remove $run_dir" >&2; [ "$status" -eq 0 ] && status=1; }
  fi
  end_step
  log "step times:"
  printf '  %s\n' "${timings[@]}"
  log "total $(($(date +%s) - script_started)) s"
  if [ "$status" -eq 0 ]; then log "passed"; else echo "compose-e2e: FAILED (exit $status)" >&2; fi
  exit "$status"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- install ----------------------------------------------------------------------------------

step "install Docker and tools from Debian's packages"
[ "$(id -u)" -eq 0 ] || fail "needs root: it installs Debian packages and starts a private dockerd"
packages=(docker.io containerd runc docker-compose debootstrap jq curl)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || fail "apt-get update failed: Debian's packages cannot be reached"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || fail "apt-get install ${missing[*]} failed"
fi
for command in dockerd containerd runc docker-compose debootstrap jq curl python3 "$docker_cli"; do
  command -v "$command" >/dev/null || fail "$command is not on PATH after the install"
done
docker-compose version --short

# --- the private daemon -----------------------------------------------------------------------

step "start a private dockerd"
mkdir -p "$state/docker"
exec 9>"$state/lock"
flock -n 9 || {
  log "another run holds $state/lock; waiting up to 30 minutes"
  flock -w 1800 9 || fail "another compose-e2e run kept $state/lock for 30 minutes"
}
holds_lock=yes
if [ -e "$run_dir/docker.pid" ] && kill -0 "$(cat "$run_dir/docker.pid")" 2>/dev/null; then
  fail "a dockerd of an earlier run (pid $(cat "$run_dir/docker.pid")) still serves $socket: stop it by its pid first"
fi
rm -rf "$run_dir"
mkdir -p "$run_dir/exec" "$DOCKER_CONFIG"
echo '{}' >"$DOCKER_CONFIG/config.json"
# overlay2: vfs copies every layer (one build of this project took 27 GB). No iptables rules, no
# change to the host's IP forwarding (so `docker run` warns "IPv4 forwarding is disabled":
# containers on one network reach each other without it, and nothing here needs more), no default
# bridge (the compose project's network is the only one).
dockerd \
  --data-root "$state/docker" \
  --exec-root "$run_dir/exec" \
  --pidfile "$run_dir/docker.pid" \
  --host "unix://$socket" \
  --storage-driver overlay2 \
  --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
  --log-level warn \
  >"$run_dir/dockerd.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 1 120); do
  docker version >/dev/null 2>&1 && break
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.5
done
if ! docker version >/dev/null 2>&1; then
  tail -n 30 "$run_dir/dockerd.log" >&2 || true
  fail "the private dockerd did not answer on $socket within 60 s (its log above)"
fi
[ "$(docker info --format '{{.Driver}}')" = overlay2 ] || fail "the daemon's storage driver is not overlay2"
log "dockerd $(docker version --format '{{.Server.Version}}') (pid $daemon_pid) on $socket, data root $state/docker"

# What an interrupted earlier run may have left in this private daemon: removed first (everything
# in it is this script's).
leftovers="$(docker ps -aq) $(docker volume ls -q) $(docker network ls -q --filter type=custom)"
if [ -n "${leftovers// /}" ]; then
  log "removing what an earlier run left: ${leftovers//$'\n'/ }"
  docker ps -aq | xargs -r "$docker_cli" rm --force --volumes >/dev/null
  docker volume ls -q | xargs -r "$docker_cli" volume rm --force >/dev/null
  docker network ls -q --filter type=custom | xargs -r "$docker_cli" network rm >/dev/null
fi
for image in "${project_images[@]}"; do
  if docker image inspect "$image" >/dev/null 2>&1; then docker image rm --force "$image" >/dev/null; fi
done

scratch=$(mktemp -d /tmp/cloudly-compose-e2e.XXXXXX)

# --- stand-in base images ---------------------------------------------------------------------

# An image is rebuilt when the recipe that made it changed: its label `cloudly.standin.key`.
standin_current() { # image key
  [ "$(docker image inspect --format '{{ index .Config.Labels "cloudly.standin.key" }}' "$1" 2>/dev/null)" = "$2" ]
}

recipe_version=1
ca_bundle=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
[ -r "$ca_bundle" ] || fail "the CA bundle $ca_bundle (SSL_CERT_FILE) is not readable"
sysroot=$(rustc --print sysroot) || fail "no Rust toolchain on this machine (rustc --print sysroot)"
runtime_key="v$recipe_version-minbase-bookworm"
builder_key="$runtime_key-$( (rustc -vV; sha256sum <"$ca_bundle") | sha256sum | cut -c1-16)"
postgres_key="$runtime_key-postgresql-15"

step "stand-in $runtime_base (debootstrap)"
if standin_current "$runtime_base" "$runtime_key"; then
  log "kept from an earlier run"
else
  rootfs="$state/rootfs.tmp"
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include=passwd bookworm "$rootfs" http://deb.debian.org/debian \
    >"$scratch/debootstrap.log" 2>&1 || { tail -n 20 "$scratch/debootstrap.log" >&2; fail "debootstrap failed"; }
  cat >"$rootfs/etc/apt/sources.list" <<'EOF'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
  tar -C "$rootfs" --numeric-owner -c . \
    | docker import --change 'CMD ["bash"]' --change "LABEL cloudly.standin.key=$runtime_key" - "$runtime_base" \
      >/dev/null || fail "docker import of the debootstrap tree failed"
  rm -rf "$rootfs"
fi

step "stand-in $builder_base (toolchain $(rustc --version | cut -d' ' -f2))"
if standin_current "$builder_base" "$builder_key"; then
  log "kept from an earlier run"
else
  context="$scratch/builder"
  mkdir -p "$context/rust"
  tar -C "$sysroot" --exclude=./share/doc -c . | tar -C "$context/rust" -x
  cp "$ca_bundle" "$context/ca-bundle.crt"
  cat >"$context/Dockerfile" <<EOF
FROM $runtime_base
RUN apt-get update \\
    && apt-get install -y --no-install-recommends build-essential ca-certificates pkg-config \\
    && rm -rf /var/lib/apt/lists/*
COPY rust/ /usr/local/rust/
COPY ca-bundle.crt /usr/local/share/cloudly-e2e/ca-bundle.crt
ENV PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    CARGO_HOME=/usr/local/cargo \\
    CARGO_HTTP_CAINFO=/usr/local/share/cloudly-e2e/ca-bundle.crt
RUN cargo --version && rustc --version
LABEL cloudly.standin.key=$builder_key
EOF
  DOCKER_BUILDKIT=1 nice -n 10 "$docker_cli" build --network host --progress plain -t "$builder_base" "$context" \
    >"$scratch/builder.log" 2>&1 || { tail -n 30 "$scratch/builder.log" >&2; fail "the builder stand-in did not build"; }
  rm -rf "$context"
fi

step "stand-in $postgres_image (Debian's postgresql-15)"
if standin_current "$postgres_image" "$postgres_key"; then
  log "kept from an earlier run"
else
  context="$scratch/postgres"
  mkdir -p "$context"
  cat >"$context/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
# The official image's interface, as far as the compose file uses it: POSTGRES_USER (default
# postgres), POSTGRES_PASSWORD (required), POSTGRES_DB (default the user) on the first start of an
# empty PGDATA; password authentication over TCP; runs as postgres.
set -eu
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 0700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?is required (as by the official image)}"
  user=${POSTGRES_USER:-postgres}
  database=${POSTGRES_DB:-$user}
  password_file=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$password_file"
  initdb --username="$user" --pwfile="$password_file" --encoding=UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 -D "$PGDATA" >/dev/null
  rm -f "$password_file"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  if [ "$database" != postgres ]; then
    echo "CREATE DATABASE \"$database\";" | postgres --single -D "$PGDATA" postgres >/dev/null
  fi
  echo "docker-entrypoint.sh: initialized $PGDATA (user $user, database $database)"
fi
exec "$@"
EOF
  chmod 0755 "$context/docker-entrypoint.sh"
  cat >"$context/Dockerfile" <<EOF
FROM $runtime_base
RUN mkdir -p /etc/postgresql-common \\
    && echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf \\
    && apt-get update \\
    && apt-get install -y --no-install-recommends postgresql-15 \\
    && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    PGDATA=/var/lib/postgresql/data
RUN install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data
COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
VOLUME /var/lib/postgresql/data
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
LABEL cloudly.standin.key=$postgres_key
EOF
  DOCKER_BUILDKIT=1 nice -n 10 "$docker_cli" build --network host --progress plain -t "$postgres_image" "$context" \
    >"$scratch/postgres.log" 2>&1 || { tail -n 30 "$scratch/postgres.log" >&2; fail "the PostgreSQL stand-in did not build"; }
fi

# --- the project's images ---------------------------------------------------------------------

for target in runtime e2e; do
  image=cloudly:local
  [ "$target" = e2e ] && image=cloudly-e2e:local
  step "build $image (deploy/Dockerfile, target $target)"
  DOCKER_BUILDKIT=1 nice -n 10 "$docker_cli" build --network host --progress plain \
    --build-arg RUST_IMAGE="$builder_base" --build-arg RUNTIME_IMAGE="$runtime_base" \
    --file deploy/Dockerfile --target "$target" --tag "$image" . >"$scratch/build-$target.log" 2>&1 \
    || { tail -n 40 "$scratch/build-$target.log" >&2; fail "docker build of $image failed (its last lines above)"; }
  { grep -E '^#[0-9]+ (CACHED|DONE [0-9.]+s)$' "$scratch/build-$target.log" || true; } | awk '{print $2}' | sort | uniq -c \
    | awk '{printf "%s %s; ", $1, $2} END {print ""}' | sed 's/^/  build steps: /'
done

# --- up ---------------------------------------------------------------------------------------

# Two free ports on 127.0.0.1 for the controllers (5432 stays the host's: PostgreSQL publishes none).
read -r port_1 port_2 < <(python3 -c '
import socket
sockets = [socket.socket() for _ in range(2)]
for each in sockets: each.bind(("127.0.0.1", 0))
print(*(each.getsockname()[1] for each in sockets))')
url_1=http://127.0.0.1:$port_1
url_2=http://127.0.0.1:$port_2

container() { compose ps -q "$1"; }

# Waits until the service's container reports `healthy` (its HEALTHCHECK), up to $2 seconds.
wait_healthy() { # service seconds
  local id deadline=$(($(date +%s) + $2)) health
  id=$(container "$1")
  [ -n "$id" ] || fail "no container for $1"
  while true; do
    health=$(docker inspect --format '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$id")
    [ "$health" = healthy ] && return 0
    [ "$(date +%s)" -ge "$deadline" ] && fail "$1 is '$health', not healthy, after $2 s"
    sleep 1
  done
}

readyz() { curl --silent --output /dev/null --write-out '%{http_code}' --max-time 3 "$1/readyz" || true; }

step "docker-compose up (both controllers healthy)"
compose up --detach --no-build 2>&1 | sed 's/^/  | /'
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "docker-compose up failed"
wait_healthy cloudly-1 120
wait_healthy cloudly-2 120
for url in "$url_1" "$url_2"; do
  [ "$(readyz "$url")" = 200 ] || fail "$url/readyz is not 200"
done
# Published on 127.0.0.1 only.
for service in cloudly-1 cloudly-2; do
  bindings=$(docker inspect --format '{{json .HostConfig.PortBindings}}' "$(container "$service")")
  [ "$(jq -r '[.[][] .HostIp] | unique | join(",")' <<<"$bindings")" = 127.0.0.1 ] \
    || fail "$service publishes on other addresses than 127.0.0.1: $bindings"
done
[ -z "$(docker inspect --format '{{json .HostConfig.PortBindings}}' "$(container postgres)" | jq -r 'select(. != null and . != {}) | keys[]')" ] \
  || fail "postgres publishes a port"
log "cloudly-1 on $url_1, cloudly-2 on $url_2, both healthy"

# --- the end-to-end suite ---------------------------------------------------------------------

step "end-to-end suite against both controllers (profile e2e)"
set +e
compose --profile e2e run --rm -T e2e >"$scratch/e2e.log" 2>&1
e2e_status=$?
set -e
{ grep -E '^(test |running [0-9]|test result|error)' "$scratch/e2e.log" || true; } | sed 's/^/  | /'
[ "$e2e_status" -eq 0 ] || { tail -n 60 "$scratch/e2e.log" >&2; fail "the end-to-end suite failed, exit $e2e_status (its last lines above)"; }
grep -q '^test result: ok\. [1-9]' "$scratch/e2e.log" || fail "the end-to-end suite ran no test"

# --- faults -----------------------------------------------------------------------------------

# The CLI of the image built above (a bookworm binary, as this machine).
cli_container=$(docker create cloudly:local)
docker cp "$cli_container:/usr/local/bin/cloudly" "$scratch/cloudly" >/dev/null
docker rm --volumes "$cli_container" >/dev/null
compose exec -T cloudly-1 cat /var/lib/cloudly/admin-identity.json >"$scratch/admin.json" \
  || fail "no administrator identity in cloudly-1's data directory"
export CLOUDLY_STATE_DIR="$scratch/cli-state"
cli() { # url args...
  local url=$1
  shift
  "$scratch/cloudly" --url "$url" --identity "$scratch/admin.json" --timeout "${cli_timeout:-5s}" "$@"
}

step "fault: docker kill of cloudly-2 in a burst of designations"
cluster=c1
cli "$url_1" apply -f deploy/examples/inventory.yaml -o json >"$scratch/apply.json" || fail "cloudly apply failed"
# One worker per controller rotates the ingress designation of one cluster (compare-and-swap,
# so they race: `designation-conflict` refusals are expected) until told to stop.
burst() { # name url
  local name=$1 url=$2 index=0 status
  mkdir -p "$scratch/burst/$name"
  while [ ! -e "$scratch/burst/stop" ]; do
    index=$((index + 1))
    status=0
    cli "$url" ingress designate --cluster "$cluster" --service ingress -o json \
      >"$scratch/burst/$name/$index.out" 2>"$scratch/burst/$name/$index.err" || status=$?
    echo "$status $(date +%s%N)" >"$scratch/burst/$name/$index.status"
    # A controller that is gone answers at once: no need to spin.
    if [ "$status" = 3 ]; then sleep 0.1; fi
  done
}
accepted() { # name [since-nanoseconds]
  local since=${2:-0} count=0 file
  for file in "$scratch/burst/$1"/*.status; do
    [ -e "$file" ] || continue
    read -r status at <"$file"
    [ "$status" = 0 ] && [ "$at" -gt "$since" ] && count=$((count + 1))
  done
  echo "$count"
}
burst survivor "$url_1" &
survivor_pid=$!
burst victim "$url_2" &
victim_pid=$!
deadline=$(($(date +%s) + 60))
until [ "$(accepted survivor)" -ge 5 ] && [ "$(accepted victim)" -ge 5 ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "the burst does not run: $(accepted survivor) and $(accepted victim) accepted in 60 s"
  sleep 0.2
done
victim_container=$(container cloudly-2)
docker kill "$victim_container" >/dev/null
killed_at=$(date +%s%N)
log "killed cloudly-2 after $(accepted survivor) + $(accepted victim) accepted designations"
deadline=$(($(date +%s) + 60))
until [ "$(accepted survivor "$killed_at")" -ge 5 ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "cloudly-1 accepted $(accepted survivor "$killed_at") designations in 60 s after the kill"
  sleep 0.2
done
sleep 1
touch "$scratch/burst/stop"
wait "$survivor_pid" "$victim_pid"
[ "$(readyz "$url_1")" = 200 ] || fail "cloudly-1 is not ready after the kill"
unanswered=0
for file in "$scratch/burst/victim"/*.status; do
  read -r status at <"$file"
  [ "$at" -gt "$killed_at" ] && [ "$status" = 3 ] && unanswered=$((unanswered + 1))
done
[ "$unanswered" -ge 1 ] || fail "no call met the killed controller"
# Every refusal is a lost race (or, through the victim, a cut-off call); through the survivor
# every call was answered.
for file in "$scratch/burst/survivor"/*.status; do
  read -r status _ <"$file"
  case "$status" in
    0) ;;
    1) jq -e '.error.data.code // .error.data | tostring | test("designation-conflict|mutation-conflict|spec-revision-mismatch")' \
         "${file%.status}.err" >/dev/null 2>&1 || fail "cloudly-1 refused a designation otherwise: $(cat "${file%.status}.err")" ;;
    *) fail "cloudly-1 did not answer a designation (exit $status): $(cat "${file%.status}.err")" ;;
  esac
done
# Stored and chained: the audit chain, oldest first (every page), through the survivor.
designation_chain() { # url file
  local from=1 page="$scratch/page.json"
  echo '[]' >"$2"
  while [ -n "$from" ]; do
    cli "$1" ingress list --cluster "$cluster" --from-generation "$from" --limit 500 -o json >"$page" \
      || fail "ingress list --from-generation $from failed"
    jq -s '.[0] + .[1].designations' "$2" "$page" >"$2.tmp" && mv "$2.tmp" "$2"
    from=$(jq -r '.nextGeneration // empty' "$page")
  done
}
designation_chain "$url_1" "$scratch/chain.json"
# Generations 1, 2, … of one id, each linking the one before by reference. (The chain is read as
# a file, never passed as an argument: a long burst makes it larger than one argument may be.)
jq -e '. as $chain | length > 0
  and all(to_entries[]; .value.generation == .key + 1 and .value.id == $chain[0].id)
  and all(range(1; length) as $i | .[$i]; .previous == ($chain[.generation - 2] | {id, generation, digest}))
  and (.[0].previous == null)' "$scratch/chain.json" >/dev/null \
  || fail "the designation chain does not link: $(jq -c '[.[] | {generation, previous}]' "$scratch/chain.json" | head -c 600)"
# Each is valid under the contract (its digest is its content's).
mkdir -p "$scratch/chain"
length=$(jq length "$scratch/chain.json")
for index in $(seq 0 $((length - 1))); do
  jq ".[$index]" "$scratch/chain.json" >"$scratch/chain/$index.json"
  "$scratch/cloudly" contract validate --kind cluster-ingress-designation "$scratch/chain/$index.json" >/dev/null \
    || fail "generation $((index + 1)) of the chain is not valid: $("$scratch/cloudly" contract validate --kind cluster-ingress-designation "$scratch/chain/$index.json")"
done
# Every designation answered as accepted (through either controller) is in the chain as answered,
# and no generation was answered to two calls.
for name in survivor victim; do
  for file in "$scratch/burst/$name"/*.status; do
    read -r status _ <"$file"
    [ "$status" = 0 ] || continue
    jq -e --slurpfile chain "$scratch/chain.json" \
      '.designation as $d | $chain[0][$d.generation - 1].digest == $d.digest' "${file%.status}.out" >/dev/null \
      || fail "an accepted designation is not stored as answered: $(jq -c '.designation | {generation, digest}' "${file%.status}.out")"
  done
done
accepted_total=$(( $(accepted survivor) + $(accepted victim) ))
distinct=$(for file in "$scratch"/burst/*/*.status; do
  read -r status _ <"$file"
  if [ "$status" = 0 ]; then jq -r .designation.generation "${file%.status}.out"; fi
done | sort -u | wc -l)
[ "$distinct" -eq "$accepted_total" ] || fail "$accepted_total accepted answers share $distinct generations"
log "$accepted_total accepted designations ($(accepted survivor "$killed_at") through cloudly-1 after the kill, $unanswered calls cut off by it), all stored; the chain of $length generations verifies"
# The killed controller starts again and is healthy, on the same database and keys.
compose start cloudly-2 2>&1 | sed 's/^/  | /'
wait_healthy cloudly-2 120
[ "$(readyz "$url_2")" = 200 ] || fail "cloudly-2 is not ready after its restart"
designation_chain "$url_2" "$scratch/chain-2.json"
cmp -s <(jq -c . "$scratch/chain.json") <(jq -c . "$scratch/chain-2.json") || fail "cloudly-2 reads another chain after its restart"

step "fault: the database stopped and started, then restarted"
started_at() { docker inspect --format '{{.State.StartedAt}} {{.RestartCount}}' "$(container "$1")"; }
before_1=$(started_at cloudly-1)
before_2=$(started_at cloudly-2)
postgres_container=$(container postgres)
docker stop --time 10 "$postgres_container" >/dev/null
# While it is down both answer /readyz 503, and a designation is refused, not hung.
deadline=$(($(date +%s) + 30))
until [ "$(readyz "$url_1")" = 503 ] && [ "$(readyz "$url_2")" = 503 ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "/readyz is $(readyz "$url_1") and $(readyz "$url_2"), not 503, 30 s after the database stopped"
  sleep 0.5
done
status=0
# (The controller's request timeout is 10 s by default: the CLI waits longer.)
cli_timeout=30s cli "$url_1" ingress designate --cluster "$cluster" --service ingress -o json >/dev/null 2>"$scratch/down.err" || status=$?
[ "$status" = 1 ] || fail "a designation while the database is down exits $status, not 1 (refused): $(cat "$scratch/down.err")"
log "database down: both /readyz 503, a designation refused: $(jq -c '.error.data // .error' "$scratch/down.err" 2>/dev/null | head -c 200)"
docker start "$postgres_container" >/dev/null
wait_healthy postgres 60
recovered() {
  local deadline=$(($(date +%s) + 30))
  until [ "$(readyz "$url_1")" = 200 ] && [ "$(readyz "$url_2")" = 200 ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "/readyz is $(readyz "$url_1") and $(readyz "$url_2"), not 200, 30 s after the database $1"
    sleep 0.5
  done
}
recovered "started"
# `docker restart`: the same, in one command.
docker restart --time 10 "$postgres_container" >/dev/null
wait_healthy postgres 60
recovered "restarted"
cli "$url_1" ingress designate --cluster "$cluster" --service ingress -o json >/dev/null || fail "cloudly-1 does not designate after the database came back"
cli "$url_2" ingress designate --cluster "$cluster" --service ingress -o json >/dev/null || fail "cloudly-2 does not designate after the database came back"
{ [ "$(started_at cloudly-1)" = "$before_1" ] && [ "$(started_at cloudly-2)" = "$before_2" ]; } \
  || fail "a controller was restarted: $before_1 / $before_2 became $(started_at cloudly-1) / $(started_at cloudly-2)"
log "both controllers recovered without a restart of their own"

step "fault: docker-compose down, then up (volumes and keys kept)"
# shellcheck disable=SC2016 # expanded in the container
keys_digest() { compose run --rm --no-deps -T keys 'cd "$CLOUDLY_KEYS_DIR" && sha256sum identity.ed25519 signing.ed25519 secret.key'; }
keys_before=$(keys_digest) || fail "cannot read the keys volume"
signing_before=$(cli "$url_1" call getControllerSigningKeys -f - -o json <<<'{}') || fail "getControllerSigningKeys failed"
designation_chain "$url_1" "$scratch/chain-before.json"
compose down --timeout 20 2>&1 | sed 's/^/  | /'
[ -z "$(compose ps -q)" ] || fail "containers left after docker-compose down"
compose up --detach --no-build 2>&1 | sed 's/^/  | /'
wait_healthy cloudly-1 120
wait_healthy cloudly-2 120
keys_after=$(keys_digest) || fail "cannot read the keys volume after up"
[ "$keys_before" = "$keys_after" ] || fail "the key files changed across down and up"
signing_after=$(cli "$url_2" call getControllerSigningKeys -f - -o json <<<'{}') || fail "getControllerSigningKeys failed after up"
[ "$(jq -S . <<<"$signing_before")" = "$(jq -S . <<<"$signing_after")" ] || fail "the published signing keys changed across down and up"
designation_chain "$url_2" "$scratch/chain-after.json"
cmp -s "$scratch/chain-before.json" "$scratch/chain-after.json" || fail "the designation chain changed across down and up"
cli "$url_2" ingress designate --cluster "$cluster" --service ingress -o json >/dev/null || fail "no designation after up"
log "keys, signing keys and the chain of $(jq length "$scratch/chain-after.json") generations kept across down and up"

end_step
