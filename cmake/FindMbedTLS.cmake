# Debian's libmbedtls-dev ships neither a .pc file nor a CMake config, so find
# the header and the three libraries by hand and chain them as imported targets.
find_path(MbedTLS_INCLUDE_DIR mbedtls/ssl.h)
find_library(MbedTLS_LIBRARY mbedtls)
find_library(MbedX509_LIBRARY mbedx509)
find_library(MbedCrypto_LIBRARY mbedcrypto)

if(MbedTLS_INCLUDE_DIR AND EXISTS "${MbedTLS_INCLUDE_DIR}/mbedtls/version.h")
  file(STRINGS "${MbedTLS_INCLUDE_DIR}/mbedtls/version.h" _al_mbed_ver
       REGEX "^#define[ \t]+MBEDTLS_VERSION_STRING[ \t]+\"")
  string(REGEX REPLACE ".*\"([0-9.]+)\".*" "\\1" MbedTLS_VERSION "${_al_mbed_ver}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(MbedTLS
  REQUIRED_VARS MbedTLS_INCLUDE_DIR MbedTLS_LIBRARY MbedX509_LIBRARY MbedCrypto_LIBRARY
  VERSION_VAR MbedTLS_VERSION)

if(MbedTLS_FOUND AND NOT TARGET MbedTLS::mbedtls)
  add_library(MbedTLS::mbedcrypto UNKNOWN IMPORTED)
  set_target_properties(MbedTLS::mbedcrypto PROPERTIES
    IMPORTED_LOCATION "${MbedCrypto_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${MbedTLS_INCLUDE_DIR}")
  add_library(MbedTLS::mbedx509 UNKNOWN IMPORTED)
  set_target_properties(MbedTLS::mbedx509 PROPERTIES
    IMPORTED_LOCATION "${MbedX509_LIBRARY}"
    INTERFACE_LINK_LIBRARIES MbedTLS::mbedcrypto)
  add_library(MbedTLS::mbedtls UNKNOWN IMPORTED)
  set_target_properties(MbedTLS::mbedtls PROPERTIES
    IMPORTED_LOCATION "${MbedTLS_LIBRARY}"
    INTERFACE_LINK_LIBRARIES MbedTLS::mbedx509)
endif()
