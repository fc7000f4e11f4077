# The CLI as a new user meets it: the README's session transcript is what dsv4 prints today
# (tests/scripts/readme_session.py runs it; --write regenerates it), `dsv4 --version`, range errors that say
# what is wanted in words (no 300-digit bounds), and defaults shown in --help.
set(_dsv4 ${CMAKE_BINARY_DIR}/bin/dsv4)
if(EXISTS ${DSV4_SHARED_DIR}/fixtures/tokenizer/deepseek_v3/vocab.gguf)
  add_test(NAME cli_readme_session
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/scripts/readme_session.py ${_dsv4}
                   ${CMAKE_SOURCE_DIR}/README.md ${DSV4_SHARED_DIR})
  # Writes a 78 MB model and decodes 20 tokens: slow under the sanitizers.
  set_tests_properties(cli_readme_session PROPERTIES TIMEOUT 600 LABELS "cli;slow")
endif()
add_test(NAME cli_version COMMAND ${_dsv4} --version)
set_tests_properties(cli_version PROPERTIES PASS_REGULAR_EXPRESSION "^dsv4 [0-9]+\\.[0-9]+\\.[0-9]+" LABELS "cli")
add_test(NAME cli_range_error_n0 COMMAND ${_dsv4} run -m none.gguf -p x -n 0)
add_test(NAME cli_range_error_temp COMMAND ${_dsv4} run -m none.gguf -p x --temp -1)
set_tests_properties(cli_range_error_n0 PROPERTIES PASS_REGULAR_EXPRESSION "--n-predict: must be greater than 0 \\(got 0\\)"
  FAIL_REGULAR_EXPRESSION "[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]" LABELS "cli")
set_tests_properties(cli_range_error_temp PROPERTIES PASS_REGULAR_EXPRESSION "--temp: must not be negative \\(got -1\\)"
  LABELS "cli")
add_test(NAME cli_help_defaults COMMAND ${_dsv4} run --help)
set_tests_properties(cli_help_defaults PROPERTIES PASS_REGULAR_EXPRESSION "--n-predict INT:POSITIVE=256" LABELS "cli")
if(NOT DSV4_MINIMAL)
  add_test(NAME cli_serve_help_defaults COMMAND ${_dsv4} serve --help)
  set_tests_properties(cli_serve_help_defaults PROPERTIES
    PASS_REGULAR_EXPRESSION "--default-max-tokens[^\n]*=2048.*--max-connections[^\n]*=4096" LABELS "cli")
endif()
