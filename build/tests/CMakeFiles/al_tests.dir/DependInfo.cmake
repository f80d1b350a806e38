
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/tests/runner.c" "tests/CMakeFiles/al_tests.dir/runner.c.o" "gcc" "tests/CMakeFiles/al_tests.dir/runner.c.o.d"
  "/work/main/tests/unit/common/test_common.c" "tests/CMakeFiles/al_tests.dir/unit/common/test_common.c.o" "gcc" "tests/CMakeFiles/al_tests.dir/unit/common/test_common.c.o.d"
  "/work/main/tests/util.c" "tests/CMakeFiles/al_tests.dir/util.c.o" "gcc" "tests/CMakeFiles/al_tests.dir/util.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build/CMakeFiles/al_mockllm.dir/DependInfo.cmake"
  "/work/main/build/CMakeFiles/agentloop.dir/DependInfo.cmake"
  "/work/main/build/third_party/llhttp/CMakeFiles/llhttp_static.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
