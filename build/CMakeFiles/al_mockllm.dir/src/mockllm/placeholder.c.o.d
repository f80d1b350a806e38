CMakeFiles/al_mockllm.dir/src/mockllm/placeholder.c.o: \
 /work/main/src/mockllm/placeholder.c /usr/include/stdc-predef.h
