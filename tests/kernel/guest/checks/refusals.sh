# What perf prints when a gpupm event is asked per task or for sampling.
if perf stat -e gpupm/sm_inst_executed/ -- true > /tmp/pertask.txt 2>&1; then
    echo "per-task perf stat succeeded:"; cat /tmp/pertask.txt; exit 1
fi
echo "per-task: $(grep -m1 -i 'error\|invalid\|not supported' /tmp/pertask.txt)"
grep -q 'Invalid argument\|(22)' /tmp/pertask.txt
if perf record -a -o /tmp/perf.data -e gpupm/sm_inst_executed/ -- true > /tmp/sampling.txt 2>&1; then
    echo "sampling perf record succeeded:"; cat /tmp/sampling.txt; exit 1
fi
echo "sampling: $(grep -m1 -i 'error\|not supported' /tmp/sampling.txt)"
grep -q 'not supported\|(95)' /tmp/sampling.txt
if perf stat -a -e gpupm/sm_inst_executed,vm=64/ -- true > /tmp/badvm.txt 2>&1; then
    echo "vm=64 accepted"; exit 1
fi
grep -q 'Invalid argument\|(22)' /tmp/badvm.txt
