CMakeFiles/agentloop_cli.dir/src/client/main.c.o: \
 /work/main/src/client/main.c /usr/include/stdc-predef.h
