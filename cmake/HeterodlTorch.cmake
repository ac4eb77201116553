# Finds LibTorch inside the PyPI torch wheel of HETERODL_PYTHON (DESIGN §7).
# The wheel is CUDA-enabled; its CMake config looks for the CUDA toolkit, which
# is used to compile and link the GPU path even on a machine without a GPU.
if(NOT Torch_DIR)
  execute_process(
    COMMAND "${HETERODL_PYTHON}" -c
            "import torch; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _heterodl_torch_prefix
    OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _heterodl_torch_rc)
  if(NOT _heterodl_torch_rc EQUAL 0)
    message(FATAL_ERROR
      "HETERODL_WITH_TORCH is ON but '${HETERODL_PYTHON}' cannot import torch. "
      "Run scripts/setup.sh (creates .venv with the pinned torch) or pass "
      "-DHETERODL_WITH_TORCH=OFF for a data-group-only build.")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${_heterodl_torch_prefix}")
endif()
if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(Torch REQUIRED)
message(STATUS "LibTorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX}")

# The wheel ships no gloo headers; ProcessGroupGloo.hpp needs them, so they come
# from Debian's libgloo-dev. Only the types are used; the code is torch's own.
find_path(HETERODL_GLOO_INCLUDE_DIR gloo/context.h REQUIRED)

add_library(heterodl_torch INTERFACE)
target_link_libraries(heterodl_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(heterodl_torch SYSTEM INTERFACE
  ${TORCH_INCLUDE_DIRS} ${HETERODL_GLOO_INCLUDE_DIR})
target_compile_definitions(heterodl_torch INTERFACE
  USE_DISTRIBUTED USE_C10D_GLOO USE_C10D_NCCL)
target_compile_options(heterodl_torch INTERFACE -Wno-deprecated-declarations)
