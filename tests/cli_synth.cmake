# `dsv4 synth` end to end: the CLI writes a tiny model, twice with the same seed (byte-identical, whatever the
# thread count) and the library reproduces its bytes; bad options fail. The multi-GB V4-Flash check
# (SynthSlow.*, disabled in the default gtest run) is registered here with the label "slow".
set(DSV4_SYNTH_DIR ${CMAKE_BINARY_DIR}/synth_test_out)
file(MAKE_DIRECTORY ${DSV4_SYNTH_DIR})
set(DSV4_SYNTH_BIN ${CMAKE_BINARY_DIR}/bin/dsv4)

add_test(NAME cli_synth_tiny_a COMMAND ${DSV4_SYNTH_BIN} synth --preset tiny --seed 3 -t 2 -q
  -o ${DSV4_SYNTH_DIR}/tiny_a.gguf)
add_test(NAME cli_synth_tiny_b COMMAND ${DSV4_SYNTH_BIN} synth --preset tiny --seed 3 -t 1
  -o ${DSV4_SYNTH_DIR}/tiny_b.gguf)
set_tests_properties(cli_synth_tiny_a cli_synth_tiny_b PROPERTIES FIXTURES_SETUP synth_cli_files TIMEOUT 120)

add_test(NAME cli_synth_same_seed_same_bytes COMMAND ${CMAKE_COMMAND} -E compare_files
  ${DSV4_SYNTH_DIR}/tiny_a.gguf ${DSV4_SYNTH_DIR}/tiny_b.gguf)
add_test(NAME cli_synth_matches_library COMMAND $<TARGET_FILE:test_synth> --gtest_filter=SynthCli.*)
set_tests_properties(cli_synth_same_seed_same_bytes cli_synth_matches_library PROPERTIES
  FIXTURES_REQUIRED synth_cli_files TIMEOUT 120)
set_tests_properties(cli_synth_matches_library PROPERTIES
  ENVIRONMENT "DSV4_SYNTH_CLI_FILE=${DSV4_SYNTH_DIR}/tiny_a.gguf"
  FAIL_REGULAR_EXPRESSION "SKIPPED")

set(DSV4_VOCAB_GGUF ${DSV4_SHARED_DIR}/fixtures/tokenizer/deepseek_v3/vocab.gguf)
if(EXISTS ${DSV4_VOCAB_GGUF})
  add_test(NAME cli_synth_vocab COMMAND ${DSV4_SYNTH_BIN} synth --preset tiny --layers 2 --vocab ${DSV4_VOCAB_GGUF}
    --experts-type q4_k --dense-type q6_k -q -o ${DSV4_SYNTH_DIR}/tiny_vocab.gguf)
  set_tests_properties(cli_synth_vocab PROPERTIES TIMEOUT 120)
endif()

# Refusals: each must exit non-zero with a message naming what is wrong.
add_test(NAME cli_synth_bad_preset COMMAND ${DSV4_SYNTH_BIN} synth --preset huge -o ${DSV4_SYNTH_DIR}/x.gguf)
add_test(NAME cli_synth_bad_type COMMAND ${DSV4_SYNTH_BIN} synth --preset tiny --experts-type q9_9
  -o ${DSV4_SYNTH_DIR}/x.gguf)
add_test(NAME cli_synth_no_output COMMAND ${DSV4_SYNTH_BIN} synth --preset tiny)
add_test(NAME cli_synth_missing_vocab COMMAND ${DSV4_SYNTH_BIN} synth --preset tiny --vocab
  ${DSV4_SYNTH_DIR}/does_not_exist.gguf -o ${DSV4_SYNTH_DIR}/x.gguf)
set_tests_properties(cli_synth_bad_preset cli_synth_bad_type cli_synth_no_output cli_synth_missing_vocab
  PROPERTIES WILL_FAIL TRUE TIMEOUT 60)

# V4-Flash shapes with 2 layers + MTP: several GB written to the temp folder and removed after.
add_test(NAME synth_flash_two_layers_slow COMMAND $<TARGET_FILE:test_synth>
  --gtest_filter=SynthSlow.* --gtest_also_run_disabled_tests)
set_tests_properties(synth_flash_two_layers_slow PROPERTIES LABELS slow TIMEOUT 3600)
