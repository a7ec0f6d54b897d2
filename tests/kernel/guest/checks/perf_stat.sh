# perf stat -a -e gpupm/sm_inst_executed,vm=1/ over one second of tenant
# reads: the count equals the tenant API's delta within the publication bound.
gpupm-kpmu perf-stat sm_inst_executed 1 1 /run/gpupm/tenant/node "$GPUPM_INTERVAL_MS"
