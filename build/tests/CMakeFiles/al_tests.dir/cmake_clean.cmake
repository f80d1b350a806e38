file(REMOVE_RECURSE
  "CMakeFiles/al_tests.dir/runner.c.o"
  "CMakeFiles/al_tests.dir/runner.c.o.d"
  "CMakeFiles/al_tests.dir/unit/common/test_common.c.o"
  "CMakeFiles/al_tests.dir/unit/common/test_common.c.o.d"
  "CMakeFiles/al_tests.dir/util.c.o"
  "CMakeFiles/al_tests.dir/util.c.o.d"
  "al_tests"
  "al_tests.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/al_tests.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
