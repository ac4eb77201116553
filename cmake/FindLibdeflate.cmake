# Finds libdeflate (Debian: libdeflate-dev), which in bookworm (1.14) ships a
# pkg-config file but no CMake package. Provides Libdeflate::libdeflate.
include(HeterodlPkgConfigLibrary)
heterodl_pkg_config_library(Libdeflate libdeflate libdeflate.h deflate Libdeflate::libdeflate)
