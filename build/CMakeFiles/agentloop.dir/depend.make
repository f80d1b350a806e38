# Empty dependencies file for agentloop.
# This may be replaced when dependencies are built.
