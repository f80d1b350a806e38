
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/common/alloc.c" "CMakeFiles/agentloop.dir/src/common/alloc.c.o" "gcc" "CMakeFiles/agentloop.dir/src/common/alloc.c.o.d"
  "/work/main/src/common/buf.c" "CMakeFiles/agentloop.dir/src/common/buf.c.o" "gcc" "CMakeFiles/agentloop.dir/src/common/buf.c.o.d"
  "/work/main/src/common/errno.c" "CMakeFiles/agentloop.dir/src/common/errno.c.o" "gcc" "CMakeFiles/agentloop.dir/src/common/errno.c.o.d"
  "/work/main/src/common/misc.c" "CMakeFiles/agentloop.dir/src/common/misc.c.o" "gcc" "CMakeFiles/agentloop.dir/src/common/misc.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build/third_party/llhttp/CMakeFiles/llhttp_static.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
