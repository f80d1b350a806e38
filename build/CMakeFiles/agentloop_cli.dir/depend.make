# Empty dependencies file for agentloop_cli.
# This may be replaced when dependencies are built.
