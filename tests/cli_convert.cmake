# `dsv4 convert` end to end: the official-layout flash-mini BF16 checkpoint converts to a GGUF whose logits pass
# the golden acceptance check (shared/tools/golden_check.py; needs python3-numpy, like tests/golden.cmake). The
# FP8 release form's bit-exactness and the error cases are unit tests (tests/test_convert.cpp). A few seconds.
if(EXISTS ${DSV4_SHARED_DIR}/fixtures/checkpoint/flash-mini/bf16/config.json)
  add_test(NAME cli_convert_golden_flash_mini
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/scripts/convert_golden_check.py
                   ${CMAKE_BINARY_DIR}/bin/dsv4 ${DSV4_SHARED_DIR})
  set_tests_properties(cli_convert_golden_flash_mini PROPERTIES LABELS "golden" TIMEOUT 600)
endif()
