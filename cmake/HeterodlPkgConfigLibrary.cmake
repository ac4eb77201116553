# heterodl_pkg_config_library(NAME MODULE HEADER LIBRARY TARGET): the body of
# a Find module for a Debian library that ships a pkg-config file but no
# CMake package. Sets NAME_FOUND, NAME_VERSION, NAME_INCLUDE_DIR and
# NAME_LIBRARY, and provides the imported TARGET. A macro, so that what
# find_package_handle_standard_args sets lands in the Find module's scope.
macro(heterodl_pkg_config_library name module header library target)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(PC_${name} QUIET ${module})
  endif()
  find_path(${name}_INCLUDE_DIR ${header} HINTS ${PC_${name}_INCLUDE_DIRS})
  find_library(${name}_LIBRARY NAMES ${library} HINTS ${PC_${name}_LIBRARY_DIRS})
  set(${name}_VERSION ${PC_${name}_VERSION})
  include(FindPackageHandleStandardArgs)
  find_package_handle_standard_args(${name}
    REQUIRED_VARS ${name}_LIBRARY ${name}_INCLUDE_DIR
    VERSION_VAR ${name}_VERSION)
  if(${name}_FOUND AND NOT TARGET ${target})
    add_library(${target} UNKNOWN IMPORTED)
    set_target_properties(${target} PROPERTIES
      IMPORTED_LOCATION "${${name}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${${name}_INCLUDE_DIR}")
  endif()
  mark_as_advanced(${name}_INCLUDE_DIR ${name}_LIBRARY)
endmacro()
