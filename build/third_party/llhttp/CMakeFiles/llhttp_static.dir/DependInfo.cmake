
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/usr/share/llhttp/api.c" "third_party/llhttp/CMakeFiles/llhttp_static.dir/usr/share/llhttp/api.c.o" "gcc" "third_party/llhttp/CMakeFiles/llhttp_static.dir/usr/share/llhttp/api.c.o.d"
  "/usr/share/llhttp/http.c" "third_party/llhttp/CMakeFiles/llhttp_static.dir/usr/share/llhttp/http.c.o" "gcc" "third_party/llhttp/CMakeFiles/llhttp_static.dir/usr/share/llhttp/http.c.o.d"
  "/usr/share/llhttp/llhttp.c" "third_party/llhttp/CMakeFiles/llhttp_static.dir/usr/share/llhttp/llhttp.c.o" "gcc" "third_party/llhttp/CMakeFiles/llhttp_static.dir/usr/share/llhttp/llhttp.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
