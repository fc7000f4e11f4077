# bench/serve_load.py against a real `dsv4 serve`: a tiny random-weight model with the real DeepSeek vocabulary,
# served on a free loopback port; tests/scripts/serve_load_check.py starts the servers, runs the load
# generator and checks its report (all requests ok on a roomy server, 429s counted on a full queue).
set(DSV4_SERVE_LOAD_VOCAB ${DSV4_SHARED_DIR}/fixtures/tokenizer/deepseek_v3/vocab.gguf)
if(NOT DSV4_MINIMAL AND EXISTS ${DSV4_SERVE_LOAD_VOCAB})
  set(_dir ${CMAKE_BINARY_DIR}/serve_load)
  file(MAKE_DIRECTORY ${_dir})
  add_test(NAME serve_load_model COMMAND ${CMAKE_BINARY_DIR}/bin/dsv4 synth --preset tiny
    --vocab ${DSV4_SERVE_LOAD_VOCAB} -q -o ${_dir}/tiny.gguf)
  set_tests_properties(serve_load_model PROPERTIES FIXTURES_SETUP serve_load TIMEOUT 120 LABELS "server")
  add_test(NAME serve_load COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/scripts/serve_load_check.py
    ${CMAKE_BINARY_DIR}/bin/dsv4 ${_dir}/tiny.gguf)
  set_tests_properties(serve_load PROPERTIES FIXTURES_REQUIRED serve_load TIMEOUT 120 LABELS "server")
endif()
