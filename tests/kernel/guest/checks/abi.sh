# The publication device's semantics and refusals (no daemon yet).
gpupm-kpmu abi
