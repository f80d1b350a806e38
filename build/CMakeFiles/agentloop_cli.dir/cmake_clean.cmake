file(REMOVE_RECURSE
  "CMakeFiles/agentloop_cli.dir/src/client/main.c.o"
  "CMakeFiles/agentloop_cli.dir/src/client/main.c.o.d"
  "agentloop"
  "agentloop.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/agentloop_cli.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
