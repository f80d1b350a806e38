# Empty dependencies file for llhttp_static.
# This may be replaced when dependencies are built.
