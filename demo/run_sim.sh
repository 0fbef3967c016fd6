#!/bin/sh
# Run the replayed fleet (the command given as arguments, e.g. `manage.py simulate_fleet ...`)
# with its output appended to var/simulator.log, and say so on the terminal (stderr) when it
# stops by itself: `make demo` keeps runserver in the foreground, so without this a fleet that
# dies (missing data, a crash) leaves an empty dashboard and a silent terminal.
# SIGTERM/SIGINT/SIGHUP (make demo's exit trap) stop the fleet quietly (SIGKILL after
# STOP_GRACE_S seconds, default 5, if it does not stop).
log="${SIM_LOG:-var/simulator.log}"
mkdir -p "$(dirname "$log")"
"$@" >> "$log" 2>&1 &
child=$!
# Stop the fleet: SIGTERM, then SIGKILL if it is still there after STOP_GRACE_S seconds (a
# stuck shutdown must never leave make demo waiting forever with DEMO_HOOK_PORT held).
stop_child() {
    kill "$child" 2>/dev/null
    (
        sleep "${STOP_GRACE_S:-5}"
        if kill -0 "$child" 2>/dev/null; then
            echo "  make demo: the replayed fleet ignored SIGTERM: killing it." >&2
            kill -KILL "$child" 2>/dev/null
        fi
    ) &
    killer=$!
    wait "$child" 2>/dev/null
    kill "$killer" 2>/dev/null
    exit 0
}
trap stop_child TERM INT HUP
wait "$child"
rc=$?
if [ "$rc" -ne 0 ]; then
    echo "" >&2
    echo "  make demo: the replayed fleet DIED (exit $rc); the dashboard keeps running but no" >&2
    echo "  host reports any more. Last lines of $log:" >&2
    tail -n 15 "$log" | sed 's/^/    /' >&2
else
    echo "  make demo: the replayed fleet stopped (see $log)." >&2
fi
exit "$rc"
