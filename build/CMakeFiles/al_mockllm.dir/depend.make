# Empty dependencies file for al_mockllm.
# This may be replaced when dependencies are built.
