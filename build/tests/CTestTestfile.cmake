# CMake generated Testfile for 
# Source directory: /work/main/tests
# Build directory: /work/main/build/tests
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test([=[common_buf_bounds]=] "/work/main/build/tests/al_tests" "common_buf_bounds")
set_tests_properties([=[common_buf_bounds]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;22;add_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[common_buf_printf_consume]=] "/work/main/build/tests/al_tests" "common_buf_printf_consume")
set_tests_properties([=[common_buf_printf_consume]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;22;add_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[common_errno_table]=] "/work/main/build/tests/al_tests" "common_errno_table")
set_tests_properties([=[common_errno_table]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;22;add_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[common_alloc_hook_reaches_libs]=] "/work/main/build/tests/al_tests" "common_alloc_hook_reaches_libs")
set_tests_properties([=[common_alloc_hook_reaches_libs]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;22;add_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[common_version]=] "/work/main/build/tests/al_tests" "common_version")
set_tests_properties([=[common_version]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;22;add_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[runner_timeout_kills_test]=] "/work/main/build/tests/al_tests" "runner_timeout_kills_test")
set_tests_properties([=[runner_timeout_kills_test]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;22;add_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[runner_hang_probe]=] "/work/main/build/tests/al_tests" "runner_hang_probe")
set_tests_properties([=[runner_hang_probe]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;22;add_test;/work/main/tests/CMakeLists.txt;0;")
