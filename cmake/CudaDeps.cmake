# cuDNN and NCCL live beside the toolkit in /usr/local/cuda; the cudnn-frontend
# headers come from the PyPI wheel (tools/setup.sh), found through python.
find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
find_package(Python3 COMPONENTS Interpreter REQUIRED)
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c "import sysconfig; print(sysconfig.get_paths()['purelib'] + '/include')"
  OUTPUT_VARIABLE _fe_hint OUTPUT_STRIP_TRAILING_WHITESPACE)
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${_fe_hint} REQUIRED)
message(STATUS "cudnn-frontend: ${CUDNN_FRONTEND_INCLUDE_DIR}")
