# End-to-end test of `dsv4 prompt` against the official-encoder fixture (tests/scripts/cli_prompt_check.py).
# Included from tests/CMakeLists.txt, which defines DSV4_SHARED_DIR.
if(DSV4_MINIMAL)
  return()
endif()
find_program(DSV4_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
find_program(DSV4_PYTHON3 NAMES python3)
if(NOT DSV4_PYTHON3)
  message(STATUS "python3 not found: cli_prompt test skipped")
  return()
endif()
add_test(NAME cli_prompt_fixtures
         COMMAND ${DSV4_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/scripts/cli_prompt_check.py $<TARGET_FILE:dsv4>
                 ${DSV4_SHARED_DIR}/fixtures/chat/encode_cases.json)
set_tests_properties(cli_prompt_fixtures PROPERTIES TIMEOUT 300 LABELS "cli")
