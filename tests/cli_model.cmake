# End-to-end checks of `dsv4 logits` error handling and `dsv4 run` reproducibility (tests/scripts/cli_model_check.py).
# Sanitizer builds decode a few tokens per second: shorter chat answers keep the test inside its time limit.
if(DSV4_SANITIZE)
  set(DSV4_CHAT_TEST_TOKENS 200)
else()
  set(DSV4_CHAT_TEST_TOKENS 4000)
endif()
add_test(NAME cli_model
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/scripts/cli_model_check.py ${CMAKE_BINARY_DIR}/bin/dsv4
                 ${DSV4_SHARED_DIR} ${CMAKE_BINARY_DIR}/cli_model ${DSV4_CHAT_TEST_TOKENS})
set_tests_properties(cli_model PROPERTIES TIMEOUT 900 LABELS "cli")
