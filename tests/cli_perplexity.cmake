# `dsv4 perplexity` end to end (tests/scripts/cli_perplexity_check.py): the golden flash-mini sequence's
# perplexity against the official reference's exact_fp32 logits, a text file on a tiny synthetic model, and
# bad input as clear errors.
if(EXISTS ${DSV4_SHARED_DIR}/golden/flash-mini/manifest.json AND NOT DSV4_MINIMAL)
  add_test(NAME cli_perplexity
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/scripts/cli_perplexity_check.py ${CMAKE_BINARY_DIR}/bin/dsv4
                   ${DSV4_SHARED_DIR} ${CMAKE_BINARY_DIR}/cli_perplexity)
  set_tests_properties(cli_perplexity PROPERTIES TIMEOUT 600 LABELS "cli")
endif()
