file(REMOVE_RECURSE
  "CMakeFiles/agentloop.dir/src/common/alloc.c.o"
  "CMakeFiles/agentloop.dir/src/common/alloc.c.o.d"
  "CMakeFiles/agentloop.dir/src/common/buf.c.o"
  "CMakeFiles/agentloop.dir/src/common/buf.c.o.d"
  "CMakeFiles/agentloop.dir/src/common/errno.c.o"
  "CMakeFiles/agentloop.dir/src/common/errno.c.o.d"
  "CMakeFiles/agentloop.dir/src/common/misc.c.o"
  "CMakeFiles/agentloop.dir/src/common/misc.c.o.d"
  "libagentloop.a"
  "libagentloop.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/agentloop.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
