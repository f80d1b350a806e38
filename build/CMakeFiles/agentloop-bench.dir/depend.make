# Empty dependencies file for agentloop-bench.
# This may be replaced when dependencies are built.
