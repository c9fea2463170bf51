# ctest dump_tool_public_api_only: ckpt-db-dump is a client of the public API only. Fails when
# the tool target sees an include directory of the project other than include/ (so that
# core/, storage/, planner/ and engine/ headers could be included), or when a tool source includes a
# project header other than ckptdb/*.h and the tool's own.
# -D INCLUDES=file listing the target's include directories, SOURCE_DIR, BINARY_DIR, TOOL_DIR.
file(STRINGS "${INCLUDES}" dirs)
foreach(dir IN LISTS dirs)
  if(dir STREQUAL "${SOURCE_DIR}/include")
    continue()
  endif()
  if(dir STREQUAL "${SOURCE_DIR}" OR dir STREQUAL "${BINARY_DIR}" OR
     dir MATCHES "^${SOURCE_DIR}/(core|storage|planner|engine|bindings)" OR
     dir MATCHES "^${BINARY_DIR}/(core|storage|planner|engine)")
    message(FATAL_ERROR "ckpt-db-dump sees the internal include directory ${dir}")
  endif()
endforeach()
file(GLOB sources "${TOOL_DIR}/*.cc" "${TOOL_DIR}/*.h")
foreach(source IN LISTS sources)
  file(STRINGS "${source}" includes REGEX "^#include \"")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" header "${line}")
    if(NOT header MATCHES "^ckptdb/" AND NOT EXISTS "${TOOL_DIR}/${header}")
      message(FATAL_ERROR "${source} includes \"${header}\", not a public header (ckptdb/*.h)")
    endif()
  endforeach()
endforeach()
list(LENGTH dirs count)
message(STATUS "ckpt-db-dump: ${count} include directories, none internal")
