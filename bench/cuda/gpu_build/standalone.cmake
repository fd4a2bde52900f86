# Standalone GPU-only build (included by bench/cuda/CMakeLists.txt when it is
# the top-level project). The GPU machines have CUDA, CMake, ninja and PyTorch
# (with cuDNN and NCCL as pip wheels) but no MPI, HDF5, Boost, and possibly no
# OpenBLAS or GoogleTest; each is found if present and substituted otherwise.
get_filename_component(FSDP_ROOT ${CMAKE_CURRENT_SOURCE_DIR}/../.. ABSOLUTE)
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_ARCHITECTURES 90a)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release)
endif()
find_package(CUDAToolkit REQUIRED)

# cuDNN: the toolkit's, else pass -DCUDNN_LIBRARY / -DCUDNN_INCLUDE_DIR (the
# pip wheel nvidia-cudnn-cu13 ships only libcudnn.so.9, hence the name list).
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h REQUIRED)
# comm/cuda_check.h includes nccl.h (declarations only; nothing links NCCL).
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
include_directories(SYSTEM ${CUDNN_INCLUDE_DIR})

add_library(fsdp_common INTERFACE)
target_include_directories(fsdp_common INTERFACE ${FSDP_ROOT})
add_library(fsdp_model ${FSDP_ROOT}/model/config.cpp ${FSDP_ROOT}/model/params.cpp
                       ${FSDP_ROOT}/model/transformer.cpp)
target_link_libraries(fsdp_model PUBLIC fsdp_common)

# The CPU reference needs cblas_sgemm: OpenBLAS when present, else a plain
# (OpenMP-parallel) substitute that is slow but exact enough for the tests.
option(FSDP_MINI_CBLAS "use the substitute sgemm even where a BLAS exists" OFF)
find_package(BLAS)
find_path(CBLAS_INCLUDE_DIR cblas.h)
add_library(fsdp_model_cpu ${FSDP_ROOT}/model/cpu/cpu_ops.cpp)
target_link_libraries(fsdp_model_cpu PUBLIC fsdp_model)
if(BLAS_FOUND AND CBLAS_INCLUDE_DIR AND NOT FSDP_MINI_CBLAS)
  target_link_libraries(fsdp_model_cpu PRIVATE BLAS::BLAS)
else()
  message(STATUS "no cblas: using bench/cuda/gpu_build/mini_cblas.cpp")
  find_package(OpenMP)
  target_sources(fsdp_model_cpu PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/gpu_build/mini_cblas.cpp)
  target_include_directories(fsdp_model_cpu PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/gpu_build/include)
  if(OpenMP_CXX_FOUND)
    target_link_libraries(fsdp_model_cpu PRIVATE OpenMP::OpenMP_CXX)
  endif()
endif()

# GoogleTest: installed, else built from a source tree passed as GTEST_SOURCE_DIR.
find_package(GTest QUIET)
if(NOT GTest_FOUND)
  if(NOT GTEST_SOURCE_DIR)
    message(FATAL_ERROR "GoogleTest not found: pass -DGTEST_SOURCE_DIR=<googletest source>")
  endif()
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  add_subdirectory(${GTEST_SOURCE_DIR} googletest EXCLUDE_FROM_ALL)
endif()
enable_testing()
include(${FSDP_ROOT}/cmake/Testing.cmake)

add_subdirectory(${FSDP_ROOT}/model/cuda model_cuda)
add_subdirectory(${FSDP_ROOT}/tests/model/cuda tests_model_cuda)
