# cuDNN and NCCL: in their own prefixes where CUDNN_HOME / NCCL_HOME (or
# CUDNN_ROOT / NCCL_ROOT) name them, as a cluster's modules and PyPI's wheels
# keep them; else beside the toolkit (/usr/local/cuda here). Named prefixes
# come first, so a module's newer NCCL wins over one the toolkit carries.
# -DCUDNN_INCLUDE_DIR=... -DCUDNN_LIBRARY=... (NCCL alike) set them outright.
# The cudnn-frontend headers come from the PyPI wheel (tools/setup.sh), found
# through python.
foreach(_dep CUDNN NCCL)
  set(_${_dep}_hints $ENV{${_dep}_HOME} $ENV{${_dep}_ROOT})
endforeach()
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_CUDNN_hints} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include REQUIRED)
find_library(CUDNN_LIBRARY cudnn HINTS ${_CUDNN_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64 REQUIRED)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_NCCL_hints} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include REQUIRED)
find_library(NCCL_LIBRARY nccl HINTS ${_NCCL_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64 REQUIRED)
message(STATUS "cuDNN: ${CUDNN_LIBRARY}; NCCL: ${NCCL_LIBRARY}")
find_package(Python3 COMPONENTS Interpreter REQUIRED)
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c "import sysconfig; print(sysconfig.get_paths()['purelib'] + '/include')"
  OUTPUT_VARIABLE _fe_hint OUTPUT_STRIP_TRAILING_WHITESPACE)
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${_fe_hint} REQUIRED)
message(STATUS "cudnn-frontend: ${CUDNN_FRONTEND_INCLUDE_DIR}")
