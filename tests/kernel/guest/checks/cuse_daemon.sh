# gpupmd against /dev/gpupm0 (its node_dir names the character device),
# with gpupm-driver --transport cuse on a real-time clock: CYCLE read by
# 8-byte ioctl never goes back; the daemon handshakes switches through the
# node (gpupm_handshakes_total > 0), and what it reads reaches the tenant
# API (VM 1's sm_inst_executed grows over a second) and perf (the same
# event counts). perf_stat already checks the bound between the two; here,
# with everything on one emulated CPU, the device clock runs too unevenly
# for it.
# Everything here runs on CPU 0: under TCG, waking a thread on the other
# vCPU waits for its next timer tick (4 ms at HZ=250), which would swamp
# every request's cost (see docs/kernel.md).
taskset -p -c 0 $$ > /dev/null
. /checks/lib.sh
gpupm-driver --transport cuse --clock realtime > /tmp/cuse-driver-rt.log 2>&1 &
driver=$!
# A failed step must not leave the device served for the next check.
trap 'kill $driver $daemon 2> /dev/null' EXIT
await $driver grep -q "gpupm-driver ready" /tmp/cuse-driver-rt.log || { cat /tmp/cuse-driver-rt.log; exit 1; }
gpupm-kpmu cuse-monotonic /dev/gpupm0 1
mkdir -p /run/gpupm/tenant-cuse
gpupmd --config /etc/gpupm/gpupmd-cuse.toml > /tmp/gpupmd-cuse.log 2>&1 &
daemon=$!
await $daemon grep -q "kernel PMU module found" /tmp/gpupmd-cuse.log &&
    await $daemon test -e /run/gpupm/tenant-cuse/node || { cat /tmp/gpupmd-cuse.log; exit 1; }
gpupm-kpmu window sm_inst_executed 1 1 /run/gpupm/tenant-cuse/node /tmp/cuse-window
read -r tenant_delta tenant_secs < /tmp/cuse-window
echo "@@gpupm metric cuse_daemon_tenant_delta=$tenant_delta"
[ "$tenant_delta" -gt 0 ]
perf stat -a -x, -e gpupm/sm_inst_executed,vm=1/ -- sleep 1 2> /tmp/cuse-perf.txt
perf_count=$(grep 'gpupm/sm_inst_executed' /tmp/cuse-perf.txt | cut -d, -f1)
echo "@@gpupm metric cuse_daemon_perf_count=$perf_count"
[ "$perf_count" -gt 0 ] || { cat /tmp/cuse-perf.txt; exit 1; }
wget -q -O /tmp/cuse-metrics.txt http://127.0.0.1:9477/metrics
handshakes=$(awk '$1 == "gpupm_handshakes_total" { print $2 }' /tmp/cuse-metrics.txt)
fallbacks=$(awk '$1 == "gpupm_handshake_fallbacks_total" { print $2 }' /tmp/cuse-metrics.txt)
echo "@@gpupm metric cuse_daemon_handshakes=$handshakes"
echo "@@gpupm metric cuse_daemon_fallbacks=$fallbacks"
[ "${handshakes%.*}" -gt 0 ] || { grep gpupm_handshake /tmp/cuse-metrics.txt; exit 1; }
stop $daemon $driver
trap - EXIT
[ ! -e /dev/gpupm0 ]
