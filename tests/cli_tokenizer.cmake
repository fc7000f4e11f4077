# `dsv4 tokenize` / `dsv4 detokenize` end to end on the DeepSeek-V3 vocab fixture: fixture cases both ways,
# arbitrary bytes round-tripping, and clear failures on bad input (tests/scripts/cli_tokenizer.py).
# The tokenizer needs PCRE2, which DSV4_MINIMAL builds leave out.
set(DSV4_TOK_DIR ${DSV4_SHARED_DIR}/fixtures/tokenizer/deepseek_v3)
if(NOT DSV4_MINIMAL AND EXISTS ${DSV4_TOK_DIR}/vocab.gguf)
  # Debian's python3: the script needs only the standard library.
  find_program(DSV4_SYSTEM_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
  if(NOT DSV4_SYSTEM_PYTHON3)
    find_program(DSV4_SYSTEM_PYTHON3 NAMES python3)
  endif()
  if(DSV4_SYSTEM_PYTHON3)
    foreach(mode cases bytes errors)
      add_test(NAME cli_tokenizer_${mode}
               COMMAND ${DSV4_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/scripts/cli_tokenizer.py
                       ${CMAKE_BINARY_DIR}/bin/dsv4 ${DSV4_TOK_DIR}/vocab.gguf ${DSV4_TOK_DIR}/cases.jsonl ${mode})
      set_tests_properties(cli_tokenizer_${mode} PROPERTIES TIMEOUT 300 LABELS "cli")
    endforeach()
  endif()
endif()
