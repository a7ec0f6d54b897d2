# gpupm-driver (real-time clock, built-in scenario) and gpupmd with
# [kernel_pmu] enabled; waits until gpupmd says it found the module.
mkdir -p /run/gpupm/dev /run/gpupm/tenant
gpupm-driver --clock realtime --node-dir /run/gpupm/dev > /tmp/gpupm-driver.log 2>&1 &
echo $! > /run/gpupm-driver.pid
i=0
until [ -e /run/gpupm/dev/card0 ]; do
    i=$((i + 1)); [ $i -lt 600 ] || { cat /tmp/gpupm-driver.log; exit 1; }; sleep 0.1
done
gpupmd --config /etc/gpupm/gpupmd.toml > /tmp/gpupmd.log 2>&1 &
echo $! > /run/gpupmd.pid
i=0
until grep -q "kernel PMU module found" /tmp/gpupmd.log && [ -e /run/gpupm/tenant/node ]; do
    i=$((i + 1)); [ $i -lt 600 ] || { cat /tmp/gpupmd.log; exit 1; }; sleep 0.1
done
grep "kernel PMU module found" /tmp/gpupmd.log
