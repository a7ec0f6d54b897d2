# What perf does with gpupm events it cannot count. perf opens an
# uncore-style event (a PMU with a cpumask) system-wide on that mask even
# without -a, so `perf stat -e gpupm/…/ -- CMD` counts the device, not the
# command (the PMU refuses real per-task events with EINVAL: the fuzz
# check's model covers pid >= 0); sampling and bad configs are refused.
perf stat -e gpupm/sm_inst_executed/ -- true > /tmp/pertask.txt 2>&1
grep -q "system wide" /tmp/pertask.txt || { cat /tmp/pertask.txt; exit 1; }
if perf record -a -o /tmp/perf.data -e gpupm/sm_inst_executed/ -- true > /tmp/sampling.txt 2>&1; then
    echo "sampling perf record succeeded:"; cat /tmp/sampling.txt; exit 1
fi
echo "perf record prints: $(grep -m1 'support sampling' /tmp/sampling.txt)"
grep -q "doesn't support sampling" /tmp/sampling.txt || { cat /tmp/sampling.txt; exit 1; }
# perf stat reports an event the kernel refuses (EINVAL) as not supported
# and goes on.
perf stat -a -e gpupm/sm_inst_executed,vm=64/ -- true > /tmp/badvm.txt 2>&1 || true
echo "perf stat vm=64 prints: $(grep -m1 'not supported' /tmp/badvm.txt)"
grep -q '<not supported>.*vm=64' /tmp/badvm.txt || { cat /tmp/badvm.txt; exit 1; }
