# Finds libdeflate (Debian: libdeflate-dev), which in bookworm (1.14) ships a
# pkg-config file but no CMake package. Provides Libdeflate::libdeflate.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_LIBDEFLATE QUIET libdeflate)
endif()
find_path(Libdeflate_INCLUDE_DIR libdeflate.h HINTS ${PC_LIBDEFLATE_INCLUDE_DIRS})
find_library(Libdeflate_LIBRARY NAMES deflate HINTS ${PC_LIBDEFLATE_LIBRARY_DIRS})
set(Libdeflate_VERSION ${PC_LIBDEFLATE_VERSION})
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Libdeflate
  REQUIRED_VARS Libdeflate_LIBRARY Libdeflate_INCLUDE_DIR
  VERSION_VAR Libdeflate_VERSION)
if(Libdeflate_FOUND AND NOT TARGET Libdeflate::libdeflate)
  add_library(Libdeflate::libdeflate UNKNOWN IMPORTED)
  set_target_properties(Libdeflate::libdeflate PROPERTIES
    IMPORTED_LOCATION "${Libdeflate_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${Libdeflate_INCLUDE_DIR}")
endif()
mark_as_advanced(Libdeflate_INCLUDE_DIR Libdeflate_LIBRARY)
