include(GoogleTest)

# The two mains, compiled once and linked into every suite: each is a
# GoogleTest translation unit (~2 s of a 2-core CI's build, 60 times over).
# tests/gtest_main.cpp: gtest_main's, but exit 77 (Skipped) when every case skipped.
add_library(fsdp_gtest_main OBJECT ${PROJECT_SOURCE_DIR}/tests/gtest_main.cpp)
target_link_libraries(fsdp_gtest_main PUBLIC fsdp_common GTest::gtest)
add_library(fsdp_mpi_main OBJECT ${PROJECT_SOURCE_DIR}/tests/mpi_main.cpp)
target_link_libraries(fsdp_mpi_main PUBLIC fsdp_common GTest::gtest MPI::MPI_C)

# fsdp_add_test(NAME SOURCES... LIBS ...): one GoogleTest binary, run by CTest.
function(fsdp_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} fsdp_gtest_main)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77)
endfunction()

# fsdp_add_mpi_test(NAME SOURCES... LIBS... RANKS 1 2 3 4): one binary (using
# tests/mpi_main.cpp, which reduces the verdict across ranks), one CTest entry
# per rank count, each under mpirun with a timeout so a deadlock fails instead
# of hanging CI.
function(fsdp_add_mpi_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;RANKS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} fsdp_mpi_main)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  foreach(n ${T_RANKS})
    add_test(NAME ${name}.np${n}
             COMMAND ${MPIEXEC_EXECUTABLE} ${FSDP_MPIEXEC_FLAGS} ${MPIEXEC_NUMPROC_FLAG} ${n}
                     ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${name}.np${n} PROPERTIES TIMEOUT ${T_TIMEOUT} PROCESSORS ${n}
                         ENVIRONMENT "${FSDP_MPI_ENV}" SKIP_RETURN_CODE 77)
  endforeach()
endfunction()

# One machine, possibly root, possibly more ranks than cores, shared memory only.
set(FSDP_MPIEXEC_FLAGS --oversubscribe --bind-to none)
set(FSDP_MPI_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_btl=self,vader;OMPI_MCA_pml=ob1;OMPI_MCA_btl_vader_single_copy_mechanism=none;OMPI_MCA_plm=^rsh;OMPI_MCA_rmaps_base_oversubscribe=1")

# One OpenBLAS thread per process in every test (fsdptrain's CPU ops, numpy):
# the tests' models are tiny, so a second thread saves no time, and its
# spin-waiting between GEMMs burnt as much CPU again, CPU that the other ranks
# and the test beside it under `ctest -j` need (fsdptrain_eval_seq_len on 2
# cores: 42 s and 80 CPU-s with OpenBLAS's default, 35 s and 38 with one).
# Each tests/ folder's CMakeLists.txt ends with fsdp_test_environment(), which
# adds it to every test the folder made (CMake 3.25 sets test properties only
# from the folder that added the test).
set(FSDP_TEST_ENV "OPENBLAS_NUM_THREADS=1")
function(fsdp_test_environment)
  get_property(tests DIRECTORY PROPERTY TESTS)
  if(tests)
    set_property(TEST ${tests} APPEND PROPERTY ENVIRONMENT ${FSDP_TEST_ENV})
  endif()
endfunction()
