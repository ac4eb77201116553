# Finds cpp-httplib (Debian: libcpp-httplib-dev), which in bookworm (0.11)
# ships a compiled library and a pkg-config file but no CMake package.
# Provides Httplib::httplib, with the feature macros the library was built
# with: its classes' layout depends on them.
include(HeterodlPkgConfigLibrary)
heterodl_pkg_config_library(Httplib cpp-httplib httplib.h cpp-httplib Httplib::httplib)
if(Httplib_FOUND)
  set(_heterodl_httplib_definitions ${PC_Httplib_CFLAGS_OTHER})
  list(FILTER _heterodl_httplib_definitions INCLUDE REGEX "^-D")
  list(TRANSFORM _heterodl_httplib_definitions REPLACE "^-D" "")
  set_target_properties(Httplib::httplib PROPERTIES
    INTERFACE_COMPILE_DEFINITIONS "${_heterodl_httplib_definitions}")
endif()
