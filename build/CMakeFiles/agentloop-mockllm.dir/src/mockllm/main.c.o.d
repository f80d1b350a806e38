CMakeFiles/agentloop-mockllm.dir/src/mockllm/main.c.o: \
 /work/main/src/mockllm/main.c /usr/include/stdc-predef.h
