CMakeFiles/agentloop-bench.dir/bench/main.c.o: /work/main/bench/main.c \
 /usr/include/stdc-predef.h
