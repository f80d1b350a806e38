# Empty dependencies file for al_tests.
# This may be replaced when dependencies are built.
