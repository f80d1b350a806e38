file(REMOVE_RECURSE
  "CMakeFiles/al_mockllm.dir/src/mockllm/placeholder.c.o"
  "CMakeFiles/al_mockllm.dir/src/mockllm/placeholder.c.o.d"
  "libal_mockllm.a"
  "libal_mockllm.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/al_mockllm.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
