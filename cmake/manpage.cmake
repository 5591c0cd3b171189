# The man page (make install): cmake/mesh-llm.1.in with `mesh-llm --help` as its OPTIONS, so
# the two cannot disagree. Inputs: EXE (the built mesh-llm), IN, OUT, VERSION.
execute_process(COMMAND ${EXE} --help OUTPUT_VARIABLE help RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --help failed (${rc})")
endif()
# troff: a backslash is \e; a line starting with . or ' is a request unless escaped by \&;
# a leading "-" stays literal in .nf text, but mark every "-" as a minus for copy-paste
string(REPLACE "\\" "\\e" help "${help}")
string(REPLACE "-" "\\-" help "${help}")
string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" help "${help}")
string(STRIP "${help}" MESH_HELP)
set(MESH_VERSION ${VERSION})
configure_file(${IN} ${OUT} @ONLY)
