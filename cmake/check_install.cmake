# ctest `installed_tree`: `cmake --install` of the build into an empty prefix gives a tool that
# runs from there, finding the library installed beside it (no ldconfig, no LD_LIBRARY_PATH).
#   cmake -D BINARY_DIR=build -D PREFIX=/tmp/prefix -P cmake/check_install.cmake
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${PREFIX}
  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BINARY_DIR} --prefix ${PREFIX} failed: ${err}")
endif()
set(ENV{LD_LIBRARY_PATH} "")
execute_process(COMMAND ${PREFIX}/bin/ckpt-db-dump --help
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "ckpt-db-dump")
  message(FATAL_ERROR "the installed ${PREFIX}/bin/ckpt-db-dump does not run (${rc}): ${err}")
endif()
file(REMOVE_RECURSE ${PREFIX})
