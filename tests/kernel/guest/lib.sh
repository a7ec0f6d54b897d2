# Helpers of the check scripts, sourced as `. /checks/lib.sh`. Waits poll a
# real condition every 0.1 s for at most 600 polls.

# await PID CMD...: until CMD succeeds while process PID lives.
await() {
    local pid=$1 i=0
    shift
    until "$@"; do
        i=$((i + 1))
        [ $i -lt 600 ] && [ -d "/proc/$pid" ] || return 1
        sleep 0.1
    done
}

# stop PID...: SIGTERM each (children of this shell) and require exit 0.
stop() {
    local pid i
    for pid in "$@"; do
        kill "$pid"
        i=0
        while [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2> /dev/null; do
            i=$((i + 1))
            [ $i -lt 600 ] || { echo "$pid did not stop"; return 1; }
            sleep 0.1
        done
        wait "$pid" || { echo "$pid exited with status $?"; return 1; }
    done
}
