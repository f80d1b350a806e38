# Locates every dependency from Debian 12 packages. A missing one is a fatal
# configure error that names the exact package to install.
set(AL_APT_PACKAGES "cmake pkg-config gcc libuv1-dev libmbedtls-dev libyaml-dev libjansson-dev node-llhttp ca-certificates libedit-dev libmd4c-dev libseccomp-dev bubblewrap libhiredis-dev")

function(al_missing what pkg)
  message(FATAL_ERROR "agentloop: ${what} not found.\n"
    "Install it with:\n  apt-get install -y ${pkg}\n"
    "(everything at once: apt-get install -y ${AL_APT_PACKAGES})")
endfunction()

find_package(PkgConfig QUIET)
if(NOT PkgConfig_FOUND)
  al_missing("pkg-config" "pkg-config")
endif()

pkg_check_modules(LIBUV QUIET IMPORTED_TARGET libuv>=1.44)
if(NOT LIBUV_FOUND)
  al_missing("libuv >= 1.44" "libuv1-dev")
endif()
pkg_check_modules(JANSSON QUIET IMPORTED_TARGET jansson>=2.14)
if(NOT JANSSON_FOUND)
  al_missing("jansson >= 2.14" "libjansson-dev")
endif()
pkg_check_modules(YAML QUIET IMPORTED_TARGET yaml-0.1)
if(NOT YAML_FOUND)
  al_missing("libyaml" "libyaml-dev")
endif()

# Fleet mode's Redis client (src/fleet/); its libuv adapter is a header.
pkg_check_modules(HIREDIS QUIET IMPORTED_TARGET hiredis>=0.14)
if(NOT HIREDIS_FOUND)
  al_missing("hiredis >= 0.14 (fleet mode's Redis client)" "libhiredis-dev")
endif()

find_package(MbedTLS 2.28 QUIET)
if(NOT MbedTLS_FOUND)
  al_missing("mbedtls >= 2.28" "libmbedtls-dev")
endif()

add_subdirectory(${PROJECT_SOURCE_DIR}/third_party/llhttp
                 ${PROJECT_BINARY_DIR}/third_party/llhttp)
