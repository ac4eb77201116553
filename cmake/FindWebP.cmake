# Finds libwebp's decoder (Debian: libwebp-dev), which ships pkg-config files
# but no CMake package. Provides WebP::webp.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_WEBP QUIET libwebp)
endif()
find_path(WebP_INCLUDE_DIR webp/decode.h HINTS ${PC_WEBP_INCLUDE_DIRS})
find_library(WebP_LIBRARY NAMES webp HINTS ${PC_WEBP_LIBRARY_DIRS})
set(WebP_VERSION ${PC_WEBP_VERSION})
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(WebP
  REQUIRED_VARS WebP_LIBRARY WebP_INCLUDE_DIR
  VERSION_VAR WebP_VERSION)
if(WebP_FOUND AND NOT TARGET WebP::webp)
  add_library(WebP::webp UNKNOWN IMPORTED)
  set_target_properties(WebP::webp PROPERTIES
    IMPORTED_LOCATION "${WebP_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${WebP_INCLUDE_DIR}")
endif()
mark_as_advanced(WebP_INCLUDE_DIR WebP_LIBRARY)
