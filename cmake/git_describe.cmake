# Writes OUT (a header defining TRAINLAB_GIT_DESCRIBE) from `git describe` of SOURCE_DIR, at every
# build, rewriting it only when the text changes: a commit changes the version rows record without
# a reconfigure, and an unchanged tree rebuilds nothing.
execute_process(COMMAND git describe --always --dirty --tags
                WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE describe OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT describe)
  set(describe "unknown")
endif()
set(content "#define TRAINLAB_GIT_DESCRIBE \"${describe}\"\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL content)
  file(WRITE ${OUT} "${content}")
endif()
