# `dsv4 inspect` end to end: it must read every golden model (deriving their DeepSeek-V4 config) and the
# vocab-only tokenizer GGUF (which has no model config and must still inspect fine), exiting 0.
# Damaged files are covered by tests/test_gguf_damaged.cpp (InspectCliReportsTheError).
file(GLOB DSV4_GOLDEN_MODELS ${DSV4_SHARED_DIR}/golden/*/model.gguf)
foreach(model ${DSV4_GOLDEN_MODELS})
  get_filename_component(set_dir ${model} DIRECTORY)
  get_filename_component(set_name ${set_dir} NAME)
  add_test(NAME cli_inspect_golden_${set_name} COMMAND ${CMAKE_BINARY_DIR}/bin/dsv4 inspect ${model})
  # A golden model without a derived config means the config reader and the file disagree.
  set_tests_properties(cli_inspect_golden_${set_name} PROPERTIES
    FAIL_REGULAR_EXPRESSION "no DeepSeek-V4 model config" TIMEOUT 120)
endforeach()

set(DSV4_VOCAB_GGUF ${DSV4_SHARED_DIR}/fixtures/tokenizer/deepseek_v3/vocab.gguf)
if(EXISTS ${DSV4_VOCAB_GGUF})
  add_test(NAME cli_inspect_vocab COMMAND ${CMAKE_BINARY_DIR}/bin/dsv4 inspect ${DSV4_VOCAB_GGUF})
  set_tests_properties(cli_inspect_vocab PROPERTIES TIMEOUT 120)
  add_test(NAME cli_inspect_vocab_no_tensors COMMAND ${CMAKE_BINARY_DIR}/bin/dsv4 inspect --no-tensors
    ${DSV4_VOCAB_GGUF})
  set_tests_properties(cli_inspect_vocab_no_tensors PROPERTIES TIMEOUT 120)
endif()
