# Stop the services, then unloading with an open event is refused safely
# and succeeds once everything is closed; the module loads again.
for p in gpupmd gpupm-driver; do
    pid=$(cat /run/$p.pid)
    kill "$pid"
    i=0
    while [ -d /proc/$pid ] && ! grep -q '^State:.*Z' /proc/$pid/status 2>/dev/null; do
        i=$((i + 1)); [ $i -lt 600 ] || { echo "$p did not stop"; exit 1; }; sleep 0.1
    done
done
gpupm-kpmu unload /lib/modules/gpupm_pmu.ko
