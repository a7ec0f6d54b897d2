# `perf list` shows every gpupm event.
perf list pmu > /tmp/perf-list.txt 2>&1
for e in $(ls /sys/bus/event_source/devices/gpupm/events); do
    grep -q "gpupm/$e/" /tmp/perf-list.txt || { echo "perf list lacks gpupm/$e/"; cat /tmp/perf-list.txt; exit 1; }
done
echo "@@gpupm metric perf_list_gpupm=$(grep -c 'gpupm/' /tmp/perf-list.txt)"
