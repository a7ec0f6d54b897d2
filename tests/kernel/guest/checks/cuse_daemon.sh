# gpupmd against /dev/gpupm0 (its node_dir names the character device),
# with gpupm-driver --transport cuse on a real-time clock: CYCLE read by
# 8-byte ioctl never goes back; the daemon handshakes switches through the
# node (gpupm_handshakes_total > 0) and what it reads reaches the tenant
# API and perf alike (the perf_stat bound, named cuse_perf_stat here).
# Everything here runs on CPU 0: under TCG, waking a thread on the other
# vCPU waits for its next timer tick (4 ms at HZ=250), which would swamp
# every request's cost (see docs/kernel.md).
taskset -p -c 0 $$ > /dev/null
gpupm-driver --transport cuse --clock realtime > /tmp/cuse-driver-rt.log 2>&1 &
driver=$!
i=0
until grep -q "gpupm-driver ready" /tmp/cuse-driver-rt.log; do
    i=$((i + 1)); [ $i -lt 600 ] && [ -d /proc/$driver ] || { cat /tmp/cuse-driver-rt.log; exit 1; }; sleep 0.1
done
gpupm-kpmu cuse-monotonic /dev/gpupm0 1
mkdir -p /run/gpupm/tenant-cuse
gpupmd --config /etc/gpupm/gpupmd-cuse.toml > /tmp/gpupmd-cuse.log 2>&1 &
daemon=$!
i=0
until grep -q "kernel PMU module found" /tmp/gpupmd-cuse.log && [ -e /run/gpupm/tenant-cuse/node ]; do
    i=$((i + 1)); [ $i -lt 600 ] && [ -d /proc/$daemon ] || { cat /tmp/gpupmd-cuse.log; exit 1; }; sleep 0.1
done
gpupm-kpmu perf-stat sm_inst_executed 1 1 /run/gpupm/tenant-cuse/node "$GPUPM_INTERVAL_MS" cuse_perf_stat
wget -q -O /tmp/cuse-metrics.txt http://127.0.0.1:9477/metrics
handshakes=$(awk '$1 == "gpupm_handshakes_total" { print $2 }' /tmp/cuse-metrics.txt)
fallbacks=$(awk '$1 == "gpupm_handshake_fallbacks_total" { print $2 }' /tmp/cuse-metrics.txt)
echo "@@gpupm metric cuse_daemon_handshakes=$handshakes"
echo "@@gpupm metric cuse_daemon_fallbacks=$fallbacks"
[ "${handshakes%.*}" -gt 0 ] || { grep gpupm_handshake /tmp/cuse-metrics.txt; exit 1; }
for pid in $daemon $driver; do
    kill "$pid"
    i=0
    while [ -d /proc/$pid ] && ! grep -q '^State:.*Z' /proc/$pid/status 2>/dev/null; do
        i=$((i + 1)); [ $i -lt 600 ] || { echo "$pid did not stop"; exit 1; }; sleep 0.1
    done
    wait "$pid"
done
[ ! -e /dev/gpupm0 ]
