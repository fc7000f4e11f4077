# `dsv4 bench` end to end on the CPU: a random-weight tiny model built in memory, prefill and decode at two
# context depths, the --profile table, --e2e under a JSON schema and --speculative (tests/scripts/cli_bench_check.py
# checks the JSON's contents).
add_test(NAME cli_bench
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/scripts/cli_bench_check.py ${CMAKE_BINARY_DIR}/bin/dsv4
                 ${DSV4_SHARED_DIR})
set_tests_properties(cli_bench PROPERTIES TIMEOUT 600 LABELS "cli")
