file(REMOVE_RECURSE
  "CMakeFiles/agentloop-bench.dir/bench/main.c.o"
  "CMakeFiles/agentloop-bench.dir/bench/main.c.o.d"
  "agentloop-bench"
  "agentloop-bench.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/agentloop-bench.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
