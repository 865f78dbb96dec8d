# Writes OUT (the generated conductor/version.hpp) from IN with the version and the source tree's git revision,
# only when its text changes: run at configure time and again at every build (target conductor_version), so a
# binary, and every trace it writes, names the commit it was built from, not the one CMake last configured at.
# "-dirty" marks a build with uncommitted changes to tracked files; "unknown" a tree without git.
# Usage: cmake -DSRC=<source dir> -DIN=<version.hpp.in> -DOUT=<version.hpp> -DVERSION=<x.y.z> -P git_revision.cmake
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
  OUTPUT_VARIABLE CONDUCTOR_GIT_REVISION OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT CONDUCTOR_GIT_REVISION)
  set(CONDUCTOR_GIT_REVISION "unknown")
else()
  execute_process(COMMAND git diff --quiet HEAD -- WORKING_DIRECTORY ${SRC} RESULT_VARIABLE dirty ERROR_QUIET)
  if(dirty EQUAL 1)
    string(APPEND CONDUCTOR_GIT_REVISION "-dirty")
  endif()
endif()
set(PROJECT_VERSION ${VERSION})
configure_file(${IN} ${OUT}.new @ONLY)
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.new ${OUT})
file(REMOVE ${OUT}.new)
