# Empty dependencies file for agentloop-mockllm.
# This may be replaced when dependencies are built.
