file(REMOVE_RECURSE
  "CMakeFiles/agentloop-mockllm.dir/src/mockllm/main.c.o"
  "CMakeFiles/agentloop-mockllm.dir/src/mockllm/main.c.o.d"
  "agentloop-mockllm"
  "agentloop-mockllm.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/agentloop-mockllm.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
