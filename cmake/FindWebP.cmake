# Finds libwebp's decoder (Debian: libwebp-dev), which ships pkg-config files
# but no CMake package. Provides WebP::webp.
include(HeterodlPkgConfigLibrary)
heterodl_pkg_config_library(WebP libwebp webp/decode.h webp WebP::webp)
