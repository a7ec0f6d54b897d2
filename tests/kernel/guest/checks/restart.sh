# gpupmd restarts under an open perf counter: no step back, no jump.
gpupm-kpmu restart sm_inst_executed 1 /run/gpupm/tenant/node /run/gpupmd.pid "$GPUPM_INTERVAL_MS" -- \
    gpupmd --config /etc/gpupm/gpupmd.toml
i=0
until [ "$(grep -c 'kernel PMU module found' /tmp/gpupmd.log)" -ge 2 ]; do
    i=$((i + 1)); [ $i -lt 600 ] || { cat /tmp/gpupmd.log; exit 1; }; sleep 0.1
done
