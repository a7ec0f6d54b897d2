# read() of a gpupm counter vs perf software counters.
gpupm-kpmu bench 15
