# shellcheck shell=bash
# Throwaway PostgreSQL cluster for the test suite.
#
# Usage (this file is meant to be SOURCED, not executed):
#     source .ci/postgres.sh
#     pg_start     # initdb + start in a fresh temp dir; exports SESSIONSTORE_TEST_PG_URL
#     ...          # run tests
#     pg_stop      # stop the server and delete the temp dir (safe to call twice / if never started)
#
# pg_start exports:
#     SESSIONSTORE_TEST_PG_URL  postgresql+psycopg://sessionstore@127.0.0.1:PORT/sessionstore_test
#     SESSIONSTORE_PG_DIR       temp dir holding data/, sock/ and server.log (what pg_stop deletes)
#     SESSIONSTORE_PG_BINDIR    server binaries used; SESSIONSTORE_PG_OSUSER  OS user running the server
#
# Functions return non-zero on failure instead of exiting, so an interactive shell survives;
# under `set -e` (as in .ci/run) a failure still aborts the caller.

_pg_log() { echo "[postgres.sh] $*" >&2; }

# A directory qualifies only if initdb, pg_ctl and postgres are all there: /usr/local/bin
# may hold lone pg_ctl/postgres symlinks, and mixing binaries of different versions breaks.
_pg_is_bindir() { [ -x "$1/initdb" ] && [ -x "$1/pg_ctl" ] && [ -x "$1/postgres" ]; }

_pg_find_bindir() {
    local d
    d=$(pg_config --bindir 2>/dev/null) && _pg_is_bindir "$d" && { echo "$d"; return 0; }
    # Debian/Ubuntu layout; `sort -V` so that 16 beats 9.6.
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
        _pg_is_bindir "$d" && { echo "$d"; return 0; }
    done
    return 1
}

# Run a command as the server's OS user. PostgreSQL refuses to run as root, so when we
# are root (as in CI) we drop to that user; otherwise we already are that user.
# The subshell cd's into the cluster dir so the user never needs access to our cwd.
_pg_as() {
    if [ "$(id -u)" = 0 ]; then
        (cd "$SESSIONSTORE_PG_DIR" && runuser -u "$SESSIONSTORE_PG_OSUSER" -- "$@")
    else
        (cd "$SESSIONSTORE_PG_DIR" && "$@")
    fi
}

pg_start() {
    local bindir port dir url
    if [ -n "${SESSIONSTORE_PG_DIR:-}" ] && [ -d "$SESSIONSTORE_PG_DIR" ]; then
        _pg_log "already started ($SESSIONSTORE_PG_DIR); call pg_stop first"; return 1
    fi

    if ! bindir=$(_pg_find_bindir); then
        _pg_log "no PostgreSQL server binaries found; installing Debian's postgresql package"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } >&2 \
            || { _pg_log "apt-get install postgresql failed"; return 1; }
        bindir=$(_pg_find_bindir) || { _pg_log "still no initdb/pg_ctl/postgres after install"; return 1; }
    fi
    export SESSIONSTORE_PG_BINDIR=$bindir

    # Which OS user runs the server: prefer the distro's `postgres`, else a dedicated system user.
    if [ "$(id -u)" != 0 ]; then
        SESSIONSTORE_PG_OSUSER=$(id -un)
    elif id -u postgres >/dev/null 2>&1; then
        SESSIONSTORE_PG_OSUSER=postgres
    else
        SESSIONSTORE_PG_OSUSER=sessionstore-pg
        id -u "$SESSIONSTORE_PG_OSUSER" >/dev/null 2>&1 \
            || useradd --system --no-create-home --shell /usr/sbin/nologin "$SESSIONSTORE_PG_OSUSER" \
            || { _pg_log "useradd failed"; return 1; }
    fi
    export SESSIONSTORE_PG_OSUSER

    # Explicitly under /tmp (world-traversable), not $TMPDIR, which could be e.g. under /root
    # where the server user cannot reach its own data dir. Exported right away so pg_stop can
    # clean up even if a later step fails.
    dir=$(mktemp -d /tmp/sessionstore-pg.XXXXXX) || return 1
    export SESSIONSTORE_PG_DIR=$dir
    mkdir "$dir/sock" && chown -R "$SESSIONSTORE_PG_OSUSER" "$dir" || return 1

    # --no-locale (C collation): containers often lack en_US.UTF-8, and tests must not depend on it.
    _pg_as "$bindir/initdb" -D "$dir/data" -U sessionstore --auth=trust -E UTF8 --no-locale \
        >"$dir/initdb.log" 2>&1 \
        || { _pg_log "initdb failed:"; cat "$dir/initdb.log" >&2; return 1; }

    # Ask the kernel for a free port. (Tiny race until postgres binds it; acceptable for CI.)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') \
        || return 1

    # fsync/full_page_writes off is purely for test speed: the durability tests kill the
    # *client* process mid-write, never this server, so server-side crash safety is not under test.
    # max_connections is raised because the concurrency tests open many connections at once.
    if ! _pg_as "$bindir/pg_ctl" -w -t 60 -D "$dir/data" -l "$dir/server.log" \
            -o "-c listen_addresses=127.0.0.1 -p $port -k $dir/sock -c fsync=off -c full_page_writes=off -c max_connections=200" \
            start >&2; then
        _pg_log "pg_ctl start failed; server log follows:"; cat "$dir/server.log" >&2; return 1
    fi

    "$bindir/createdb" -h 127.0.0.1 -p "$port" -U sessionstore sessionstore_test \
        || { _pg_log "createdb failed; server log follows:"; cat "$dir/server.log" >&2; return 1; }

    url="postgresql://sessionstore@127.0.0.1:$port/sessionstore_test"
    [ "$("$bindir/psql" "$url" -XtAc 'SELECT 1')" = 1 ] \
        || { _pg_log "SELECT 1 failed; server log follows:"; cat "$dir/server.log" >&2; return 1; }

    export SESSIONSTORE_TEST_PG_URL="postgresql+psycopg://sessionstore@127.0.0.1:$port/sessionstore_test"
    _pg_log "$("$bindir/postgres" --version) running as $SESSIONSTORE_PG_OSUSER on 127.0.0.1:$port (dir $dir)"
}

pg_stop() {
    local dir=${SESSIONSTORE_PG_DIR:-}
    [ -n "$dir" ] && [ -d "$dir" ] || return 0   # never started, or already stopped
    if [ -f "$dir/data/postmaster.pid" ]; then
        # fast = disconnect clients and shut down cleanly; immediate as a fallback if that hangs.
        _pg_as "$SESSIONSTORE_PG_BINDIR/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >&2 \
            || _pg_as "$SESSIONSTORE_PG_BINDIR/pg_ctl" -D "$dir/data" -m immediate -w stop >&2 \
            || _pg_log "warning: could not stop the server in $dir"
    fi
    rm -rf "$dir"
    unset SESSIONSTORE_PG_DIR SESSIONSTORE_TEST_PG_URL
    return 0
}
