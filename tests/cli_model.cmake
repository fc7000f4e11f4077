# End-to-end checks of `dsv4 logits` error handling and `dsv4 run` reproducibility (tests/scripts/cli_model_check.py).
add_test(NAME cli_model
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/scripts/cli_model_check.py ${CMAKE_BINARY_DIR}/bin/dsv4
                 ${DSV4_SHARED_DIR} ${CMAKE_BINARY_DIR}/cli_model)
set_tests_properties(cli_model PROPERTIES TIMEOUT 900 LABELS "cli")
