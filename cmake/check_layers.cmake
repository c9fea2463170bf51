# The layers and which folder may include which (docs/design.md, "Layout"):
#
#   bindings/  tools/        clients of the public API: include/ckptdb only
#   engine/                  everything below it
#   planner/   storage/      core only (and their own headers)
#   core/                    the public vocabulary headers only
#   include/ckptdb/          the public API
#
# Run as a ctest test (layering, label unit) and at configure time: every `#include "..."` of
# every source in a layer's folder is checked against what the layer may see, and each layer
# target's link libraries against the targets below it. A violation fails naming the file, the
# line and the rule.  -D SOURCE_DIR=the project root (script mode).
if(NOT SOURCE_DIR)
  set(SOURCE_DIR "${PROJECT_SOURCE_DIR}")
endif()

# The public headers that are vocabulary (the rest of include/ckptdb is the engine's API).
set(_vocabulary "ckptdb/status.h|ckptdb/shape.h|ckptdb/types.h|ckptdb/box.h|ckptdb/metadata.h|ckptdb/file_system_hooks.h")
# Headers of the test support that storage tests use (they include nothing above storage).
set(_test_support "tests/testing/temp_dir.h|tests/testing/format_v1.h|tests/testing/fault_injection.h|tests/testing/child_process.h")

# layer folder -> regex of the includes it may name
set(_allowed_core "^(${_vocabulary}|core/.*)$")
set(_allowed_planner "^(${_vocabulary}|core/.*|planner/.*)$")
set(_allowed_storage "^(${_vocabulary}|core/.*|storage/.*|${_test_support})$")
set(_allowed_include "^(ckptdb/.*)$")
set(_allowed_bindings "^(ckptdb/.*|bindings/.*|mpi4py/.*)$")
set(_allowed_engine "^(ckptdb/.*|core/.*|planner/.*|storage/.*|engine/.*|tests/testing/.*)$")

set(_violations "")
foreach(layer core planner storage include bindings engine)
  file(GLOB_RECURSE _sources "${SOURCE_DIR}/${layer}/*.h" "${SOURCE_DIR}/${layer}/*.cc")
  foreach(source IN LISTS _sources)
    file(STRINGS "${source}" _lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line IN LISTS _lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" header "${line}")
      if(NOT header MATCHES "${_allowed_${layer}}")
        file(RELATIVE_PATH rel "${SOURCE_DIR}" "${source}")
        string(APPEND _violations "\n  ${rel}: #include \"${header}\" (${layer}/ may include only ${_allowed_${layer}})")
      endif()
    endforeach()
  endforeach()
endforeach()

# The dump tool has a check of its own (tools/check_public_only.cmake).
if(_violations)
  message(FATAL_ERROR "ckptdb layering violated:${_violations}")
endif()

# Configure time: the layer targets link only what is below them.
if(COMMAND get_target_property AND TARGET ckptdb_planner)
  foreach(pair "ckptdb_planner;ckptdb_core" "ckptdb_storage;ckptdb_core")
    list(GET pair 0 target)
    list(GET pair 1 below)
    get_target_property(_links ${target} LINK_LIBRARIES)
    foreach(lib IN LISTS _links)
      if(lib MATCHES "^ckptdb" AND NOT lib STREQUAL below)
        message(FATAL_ERROR "ckptdb layering violated: ${target} links ${lib} (it may link only ${below} of the project)")
      endif()
    endforeach()
  endforeach()
endif()
message(STATUS "ckptdb layering: core, planner, storage, engine, bindings: every include within its layer's rules")
